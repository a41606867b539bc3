"""One compiled frame's guard decisions as compared across ranks (``check_ranks=True``): a
digest that every rank sends, and, when the digests differ, the decisions themselves and the
report that names the frame and the first differing guard on each side."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

from .fingerprint import differ_text


@dataclasses.dataclass(frozen=True)
class FrameDigest:
    """What one rank compiled: ``frame`` (``CompiledFrame`` as text), the number of guards
    offered and kept, and the digest of every ``(name, guard_type, decision)`` in torch's
    order (the first 16 hex digits of a SHA-256)."""

    rank: int
    frame: str
    guards: int
    kept: int
    digest: str


def decisions(explanations: Any) -> list[tuple[str, str, str, str]]:
    """``(decision, guard_type, name, rule)`` per guard of ``explanations`` (a frame's
    ``runtime.frames.FrameExplanations``: each an ``api.policy.Explanation``), in torch's order
    (``rule`` is ``"default"`` when the policy's default decided)."""
    return [(e.decision, e.guard_type, e.name, str(e.rule) if e.rule else "default") for e in explanations]


#: A name torch numbers per process: ``G['__builtins_dict___4']`` is the 4th builtins dict this
#: process installed, so a rank that compiled one frame more numbers the next one differently.
_PROCESS_COUNTER = re.compile(r"(__builtins_dict__)_\d+")


def same_across_processes(name: str) -> str:
    """``name`` without the counters torch numbers per process (``_PROCESS_COUNTER``)."""
    return _PROCESS_COUNTER.sub(r"\1", name)


def frame_digest(explanations: Any, rank: int) -> FrameDigest:
    text = "\n".join(f"{d}\t{t}\t{same_across_processes(n)}" for d, t, n, _ in decisions(explanations))
    return FrameDigest(rank=rank, frame=str(explanations.frame), guards=len(explanations),
                       kept=sum(e.keep for e in explanations),
                       digest=hashlib.sha256(text.encode()).hexdigest()[:16])


def differing(digests: list[FrameDigest]) -> list[int]:
    """The ranks whose digest differs from the first's (the group's first rank)."""
    return [d.rank for d in digests if d.digest != digests[0].digest]


def _guard(decision: tuple[str, str, str, str] | None) -> str:
    if decision is None:
        return "no guard (it has fewer)"
    keep, guard_type, name, rule = decision
    return f"{keep} {guard_type} `{name}` ({rule})"


def first_difference(a: list, b: list) -> int:
    """The index of the first element where ``a`` and ``b`` differ (the shorter one's length
    when one is a prefix of the other); only called when they differ."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x[:2] != y[:2] or same_across_processes(x[2]) != same_across_processes(y[2]):
            return i
    return min(len(a), len(b))


def divergence_report(digests: list[FrameDigest], lists: list[list[tuple[str, str, str, str]]]) -> str:
    """The report of a frame decided differently: every rank's frame, then for each rank
    that differs from the first, the first guard where they differ, on both sides."""
    ref, ref_list = digests[0], lists[0]
    lines = [f"guardpolicy: the ranks decided the guards of a compiled frame differently (check_ranks); "
             f"{differ_text(differing(digests))} from rank {ref.rank}:"]
    lines += [f"  rank {d.rank}: {d.frame}: {d.guards} guards, {d.kept} kept" for d in digests]
    for d, mine in zip(digests, lists):
        if d.digest == ref.digest:
            continue
        i = first_difference(ref_list, mine)
        lines.append(f"  first difference between rank {ref.rank} and rank {d.rank}, guard {i}:")
        lines.append(f"    rank {ref.rank}: {_guard(ref_list[i] if i < len(ref_list) else None)}")
        lines.append(f"    rank {d.rank}: {_guard(mine[i] if i < len(mine) else None)}")
    return "\n".join(lines)
