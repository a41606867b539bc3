"""A policy's fingerprint: what must be equal on every rank of a process group for the ranks
to decide guards alike, and the report that names the ranks whose fingerprints differ.

Paths are not compared: the same policy may live at another path on another machine (a
venv's ``site-packages``), so the program is compared as its listing with every rule's file
reduced to its base name, and a plugin by its name, version and the digest of its file.
``file`` is carried only to be shown when something else differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

from ..api import registry
from ..api.policy import Policy

#: The fields compared, in the order a mismatch report lists them.
COMPARED = ("policy", "params", "plugins", "program", "torch", "settings")


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """One rank's policy, as compared across ranks (plain values: it travels by pickle).

    ``program``: the first 16 hex digits of the SHA-256 of the policy's bytecode listing
    (rule files as base names), its config, stance, verify and dispatch lines, on_error and
    default. ``plugins``:
    ``(name, version, file digest, config)`` of each plugin loaded when the policy was.
    ``settings``: ``guardpolicy.compile``'s keywords that change what a call does."""

    rank: int
    policy: str
    file: str
    program: str
    params: tuple[tuple[str, Any], ...]
    plugins: tuple[tuple[str, str, str, str], ...]
    torch: str
    settings: tuple[tuple[str, Any], ...]


def fingerprint(policy: Policy, rank: int, settings: dict[str, Any]) -> Fingerprint:
    """The fingerprint of ``policy`` on ``rank`` (its global rank) with ``settings``."""
    import torch

    return Fingerprint(rank=rank, policy=policy.name, file=policy.source_file,
                       program=_program_digest(policy), params=tuple(sorted(policy.params.items())),
                       plugins=_plugin_identities(policy), torch=torch.__version__,
                       settings=tuple(sorted(settings.items())))


def _program_digest(policy: Policy) -> str:
    listing = policy.disassemble()
    for file in sorted({rule.file for rule in policy.rules} | {policy.source_file}, key=len, reverse=True):
        if file:
            listing = listing.replace(file, os.path.basename(file))
    extra = repr((sorted(policy.config.items()), policy.stance, policy.on_error, policy.default_decision,
                  getattr(policy, "verify", None), getattr(policy, "dispatch", None)))
    return hashlib.sha256(f"{listing}\n{extra}".encode()).hexdigest()[:16]


def _plugin_identities(policy: Policy) -> tuple[tuple[str, str, str, str], ...]:
    origin = policy.origin
    loaded = origin.plugins if origin is not None else registry.loaded_plugins()
    known = {p.path: p for p in registry.plugins()}
    out = []
    for path, config in loaded:
        if path == "builtin":  # the built-in filters: torch's version identifies them
            continue
        info = known.get(path)
        name, version = (info.name, info.version) if info else (os.path.basename(path), "")
        out.append((name, version, _file_digest(path), config))
    return tuple(sorted(out))


def _file_digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return ""  # not a file (the built-ins): its name and version identify it


def _show(field: str, value: Any) -> str:
    if field == "params":
        return "{" + ", ".join(f"{k}={v!r}" for k, v in value) + "}"
    if field == "plugins":
        return ", ".join(f"{n} {v} (sha256 {d or '-'}, config {c!r})" for n, v, d, c in value) or "none"
    if field == "settings":
        return ", ".join(f"{k}={v!r}" for k, v in value)
    return f"`{value}`" if field == "policy" else str(value)


def _differing_settings(groups: dict[Any, list[int]]) -> dict[Any, list[int]]:
    """The settings groups with each value reduced to the keywords whose values differ."""
    values = [dict(v) for v in groups]
    differ = {k for k in set().union(*values) if len({repr(v.get(k)) for v in values}) > 1}
    return {tuple((k, x) for k, x in value if k in differ): ranks for value, ranks in groups.items()}


def ranks_text(ranks: list[int]) -> str:
    """``rank 3`` or ``ranks 0, 2``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def differ_text(ranks: list[int]) -> str:
    """``rank 3 differs`` or ``ranks 0, 2 differ``."""
    return ranks_text(ranks) + (" differs" if len(ranks) == 1 else " differ")


def mismatch_report(prints: list[Fingerprint]) -> tuple[str, tuple[int, ...]] | None:
    """None when every fingerprint equals the first's (the group's first rank), else the
    report and the ranks that differ from the first. The report groups the ranks by value
    for each field that differs, and shows each group's policy file."""
    first = prints[0]
    differing = [p for p in prints if any(getattr(p, f) != getattr(first, f) for f in COMPARED)]
    if not differing:
        return None
    lines = [f"guardpolicy: the ranks do not use the same policy; {differ_text([p.rank for p in differing])} "
             f"from rank {first.rank}:"]
    for field in COMPARED:
        groups: dict[Any, list[int]] = {}
        for p in prints:
            groups.setdefault(getattr(p, field), []).append(p.rank)
        if len(groups) > 1:
            lines.append(f"  {'program digest' if field == 'program' else field}:")
            if field == "settings":  # only the keywords that differ
                groups = _differing_settings(groups)
            lines += [f"    {ranks_text(ranks)}: {_show(field, value)}" for value, ranks in groups.items()]
    files: dict[str, list[int]] = {}
    for p in prints:
        files.setdefault(p.file, []).append(p.rank)
    lines.append("  file: " + "; ".join(f"{ranks_text(r)}: {f}" for f, r in files.items()))
    return "\n".join(lines), tuple(p.rank for p in differing)
