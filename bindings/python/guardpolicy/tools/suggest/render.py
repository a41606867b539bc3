"""The text of a suggested policy: readable rules that decide every audited guard as the
audit meant.

* Guards with a ``path`` (the ``named_modules()`` spelling: ``layers.0.self_attn.scaling``)
  are dropped by ``path``; a number in a path becomes ``*`` (``layers.*.self_attn.scaling``)
  wherever that glob matches no guard of the same type that is kept; the guard types that
  drop the same paths share one rule (``guard_type in {TYPE_MATCH,
  NOT_PRESENT_IN_GENERIC_DICT}``).
* Guards without a path (a chain through ``type()``, ``__dict__``, ambient state) are never
  dropped: ``suggest`` keeps them (no readable name to drop them by).
* A value set holds what fits in ``WIDTH`` columns; a longer one continues in another rule
  of the same shape, so no line is a screen wide.
* An input's guard that ``suggest --from-run`` proved harmless on the values the user's run
  gave it (a per-call ``run_id``) is dropped by its exact path, ``guard_source == LOCAL``.
* Then the inputs' tensors and types (``guard_source == LOCAL``) and the guard types no
  watcher can see (the schema's ``watch_kept_guard_types``) are kept, and every other guard
  is watched (``default watch``; guardpolicy.runtime.watch).
* ``config install_free_tensors = true`` (the audit ran so too), and ``verify every N calls``
  unless told otherwise (the doc then says that nothing re-checks
  the dropped guards); a ``test`` block with one ``expect drop`` per pattern and one
  ``expect keep`` per dangerous guard.

The text is in ``guardpolicy fmt``'s layout. Importing this module does not import torch.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from typing import Any

from ...api.data import schema_list
from ...api.policy_text import PolicyText, gpol_string

#: The config line of every suggested policy: parameters and buffers installed as free tensors
#: (``install_free_tensors``), as torch's recipe and ``watch_state`` install them.
FREE_TENSORS = "config install_free_tensors = true"

#: Columns a rule line aims to stay within.
WIDTH = 120

_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


def _escaped(text: str) -> str:
    """``text`` as a glob matching only itself (``[`` as ``[[]``, ``*`` and ``?`` in a class)."""
    return text.replace("[", "[[]").replace("*", "[*]").replace("?", "[?]")


def _root(path: str) -> str:
    """The root of a path: ``input:args[0].`` , ``global:NAME.``, or ``""`` under ``self``."""
    m = re.match(r"(input|global|closure):[^.]*\.", path)
    return m.group(0) if m else ""


def _candidates(path: str) -> list[tuple[str, int]]:
    """Globs for ``path``, the most general first, each with the number of dropped paths it
    must cover to be worth a rule: every path under the same root ending the same way
    (``input:args[0].*._parameters``), then the numbers as ``*`` (``layers.*.attn.scaling``)."""
    root, last = _root(path), path.rsplit(".", 1)[-1]
    out = []
    if "." in path[len(root):]:
        out.append((_escaped(root) + "*." + _escaped(last), 3))
    globbed = _NUMBER.sub("*", _escaped(path))
    if globbed != _escaped(path):
        out.append((globbed, 2))
    return out


def patterns(dropped: list[Any], every: list[Any]) -> dict[str, set[str]]:
    """``{path pattern: guard types}`` for the dropped guards with a path: per path the most
    general glob (``_candidates``) that matches no kept guard of that type and covers enough
    dropped paths, else the exact path (``every``: all audited guards, ``dropped``: the ones to
    drop; both with ``.path`` and ``.guard_type``)."""
    drop = {(g.path, g.guard_type) for g in dropped if g.path}
    kept_paths: dict[str, list[str]] = defaultdict(list)
    dropped_paths: dict[str, list[str]] = defaultdict(list)
    for g in every:
        if g.path and (g.path, g.guard_type) not in drop:
            kept_paths[g.guard_type].append(g.path)
    for path, gtype in drop:
        dropped_paths[gtype].append(path)
    out: dict[str, set[str]] = defaultdict(set)
    for path, gtype in sorted(drop):
        chosen = path
        for glob, needed in _candidates(path):
            covers = sum(1 for p in dropped_paths[gtype] if fnmatch.fnmatchcase(p, glob))
            if covers >= needed and not any(fnmatch.fnmatchcase(p, glob) for p in kept_paths[gtype]):
                chosen = glob
                break
        out[chosen].add(gtype)
    return dict(out)


def _types_text(types: frozenset) -> str:
    names = sorted(types)
    return f"guard_type == {names[0]}" if len(names) == 1 else "guard_type in {" + ", ".join(names) + "}"


def _chunks(head: str, members: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    width = len(head) + 4
    for m in members:
        if out[-1] and width + len(m) + 2 > WIDTH:
            out.append([])
            width = len(head) + 4
        out[-1].append(m)
        width += len(m) + 2
    return out


def rules(dropped: list[Any], every: list[Any], input_types: tuple[str, ...]) -> list[str]:
    """The ``drop when`` lines (see the module docstring)."""
    exact_paths = {g.path for g in dropped}
    by_types: dict[frozenset, list[str]] = defaultdict(list)
    for pattern, types in patterns(dropped, every).items():
        by_types[frozenset(types)].append(pattern)
    lines: list[str] = []
    for types, pats in sorted(by_types.items(), key=lambda kv: sorted(kv[0])):
        cond = _types_text(types)
        if types & set(input_types):
            cond += " and guard_source != LOCAL"  # never an input (GP3008); none is listed
        globs = sorted(p for p in pats if p not in exact_paths)
        exact = sorted(p for p in pats if p in exact_paths)
        for g in globs:
            lines.append(f"  drop when {cond} and path glob {gpol_string(g)}")
        head = f"  drop when {cond} and path in {{"
        for chunk in _chunks(head, [gpol_string(p) for p in exact]) if exact else []:
            lines.append(head + ", ".join(chunk) + "}")
    return lines


def input_rules(dropped: list[Any]) -> list[str]:
    """The ``drop when`` lines of the inputs' guards ``suggest --from-run`` proved harmless on
    the values the user's run gave them: exact paths (no glob), per set of guard types."""
    by_path: dict[str, set[str]] = defaultdict(set)
    for g in dropped:
        by_path[g.path].add(g.guard_type)
    by_types: dict[frozenset, list[str]] = defaultdict(list)
    for path, types in by_path.items():
        by_types[frozenset(types)].append(path)
    lines: list[str] = []
    for types, paths in sorted(by_types.items(), key=lambda kv: sorted(kv[0])):
        head = f"  drop when {_types_text(types)} and guard_source == LOCAL and path in {{"
        for chunk in _chunks(head, [gpol_string(p) for p in sorted(paths)]):
            lines.append(head + ", ".join(chunk) + "}")
    return lines


def expect_line(decision: str, g: Any) -> str:
    return (f"  expect {decision} {{ name: {gpol_string(g.name)}, guard_type: {gpol_string(g.guard_type)}, "
            f"guard_source: {gpol_string(g.guard_source)}, path: {gpol_string(g.path)} }}")


#: The guard types of an input that stay checked on every call (docs/design-notes/watch.md: a
#: tensor passed anew, or an object whose type may differ from call to call); the checker warns
#: (GP3012) about a `watch` that reaches them.
INPUT_KEPT_TYPES = ("TENSOR_MATCH", "TYPE_MATCH")


def watched_lines() -> list[str]:
    """What follows the drop rules: the inputs' tensors and types and what no watcher can see
    kept (checked on every call), everything else watched (``default watch``: checked again
    when its state changes, under ``guardpolicy.compile``; kept by a plain ``guard_filter_fn``),
    the attributes of an object passed in as well (a KV cache passed on every call)."""
    return [f"  keep when guard_source == LOCAL and {_types_text(frozenset(INPUT_KEPT_TYPES))}",
            f"  keep when {_types_text(frozenset(schema_list('watch_kept_guard_types')))}"]


def kept_decision(g: Any) -> str:
    """What ``watched_lines`` decide for a guard the audit keeps: ``keep`` or ``watch``."""
    if g.guard_type in schema_list("watch_kept_guard_types"):
        return "keep"
    return "keep" if g.guard_source == "LOCAL" and g.guard_type in INPUT_KEPT_TYPES else "watch"


def tests(dropped: list[Any], dangerous: list[Any]) -> list[str]:
    """One ``expect drop`` per path pattern, one ``expect keep`` or ``expect watch`` per
    dangerous state and guard type (``layers.0`` and ``layers.1`` alike count once)."""
    lines: list[str] = []
    seen: set = set()
    for g in dropped:
        key = (_NUMBER.sub("*", g.path), g.guard_type)
        if key not in seen:
            seen.add(key)
            lines.append(expect_line("drop", g))
    for g in dangerous:
        key = ("keep", _NUMBER.sub("*", g.path or g.name), g.guard_type)
        if key not in seen:
            seen.add(key)
            lines.append(expect_line(kept_decision(g), g))
    return lines or ['  expect keep { name: "", guard_type: "GLOBAL_STATE" }']


def render(name: str, doc: str, header: list[str], dropped: list[Any], every: list[Any], dangerous: list[Any],
           verify: int | None, input_types: tuple[str, ...], inputs: list[Any] = ()) -> PolicyText:
    """The whole policy (``.render()`` is its ``.gpol`` text); ``inputs``: the dropped guards
    of ``dropped`` that are an input's (``input_rules``)."""
    settings = (FREE_TENSORS,) + ((f"verify every {verify} calls",)
                                                          if verify is not None and dropped else ())
    ids = {id(g) for g in inputs}
    body = (rules([g for g in dropped if id(g) not in ids], every, input_types) + input_rules(list(inputs))
            + watched_lines())
    return PolicyText(name, body=_unindented(body), default="watch", unsafe=bool(dropped), doc=doc,
                      settings=settings, header=tuple(header), tests=_unindented(tests(dropped, dangerous)))


def _unindented(lines: list[str]) -> tuple[str, ...]:
    return tuple(line[2:] for line in lines)
