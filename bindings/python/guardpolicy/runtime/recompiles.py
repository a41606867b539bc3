"""Every recompile of a compiled object, with the guard that failed in each cache entry.

When a frame of a ``guardpolicy.compile`` object compiles again, torch evaluates each of the
frame's cache entries on the new call and records, per entry, the first guard that failed
(``torch._dynamo.guards.guard_failures``, what ``TORCH_LOGS=recompiles`` prints:
``"0/1: self.step == 1  # self.step += 1  # model.py:7 in forward"``). The scoped Dynamo
callback (``guard_filter.ScopedConfigCallback``, which runs on cache misses only) reads what
torch appended during the compile and keeps it as a ``Recompile``; ``failing_guards`` names
each failure with the guard ``guardpolicy.explain`` shows for that cache entry (its name,
``guard_type`` and the value that entry was compiled for). Nothing here runs on a call that
hits a cache entry.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any, Iterable

from .frames import CompiledFrame


@dataclasses.dataclass(frozen=True)
class Recompile:
    """One compile of a frame that already had cache entries. ``frame``: the frame with the
    compile id of the new compile (``""`` when torch refused it at a recompile limit);
    ``failures``: torch's reason for each cache entry it tried, most recent entry first
    (``"0/1: self.step == 1  # self.step += 1 ..."``, first line of each)."""

    frame: CompiledFrame
    failures: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class EntryFailure:
    """One cache entry's failed guard on one recompile. ``entry``: the entry's compile id
    (``"0/3"``); ``code``: the guard's code as torch printed it (``"self.step == 3"``);
    ``name``, ``guard_type``: the guard as ``guardpolicy.explain`` names it for that entry
    (``"self.step"``, ``"EQUALS_MATCH"``; ``name`` is ``code`` and ``guard_type`` ``""``
    where no explanation has that code, e.g. a size mismatch torch words itself);
    ``expected``: the value that entry was compiled for, as the guard's code states it
    (``"3"``; ``""`` where the code states none); ``hint``: torch's own HINT, if any;
    ``watched``: the failure was seen by guardpolicy's watch (its gate's text)."""

    entry: str
    code: str
    name: str
    guard_type: str
    expected: str
    hint: str
    watched: bool


#: How guardpolicy's watch words a failure in the text of its gate's guard (watch/recheck.say).
_WATCH_PREFIX = re.compile(r"^guardpolicy watch: [^:]*: (a watched guard failed: )?")
_LOCAL = re.compile(r"L\['([A-Za-z_][A-Za-z0-9_]*)'\]")
_COMPARED = re.compile(r"^(?P<lhs>.+?) (?:==|is) (?P<rhs>.+)$")
_MISSING_KEY = re.compile(r"^KeyError on (?P<dict>.+)\[(?P<key>[^\[\]]+)\]$")
_MODULE_ITEM = re.compile(r"(?:\.__dict__\['_(?:modules|parameters|buffers)'\]|\._(?:modules|parameters|buffers))"
                          r"\['([A-Za-z_][A-Za-z0-9_]*)'\]")
#: How torch 2.11 prints a float's SHAPE_ENV guard: ``___as_tensor(self.scale).item() == 0.135``.
_AS_TENSOR = re.compile(r"___as_tensor\((.+?)\)\.item\(\)")
_DICT_ITEM = re.compile(r"\.__dict__\['([A-Za-z_][A-Za-z0-9_]*)'\]")
_TENSOR = re.compile(r"^tensor '(?P<name>[^']+)' (?P<what>.+)$")


def normalized(code: str) -> str:
    """A guard's code as torch's recompile reasons print it: ``L['self'].step == 1`` ->
    ``self.step == 1``, whitespace collapsed."""
    return " ".join(_LOCAL.sub(r"\1", code).split())


def parse_failure(text: str) -> tuple[str, str, str, bool]:
    """``(entry compile id, guard code, torch's hint, watched)`` of one of torch's failure
    reasons (``"0/1: self.step == 1  # self.step += 1  # f.py:7 in forward (HINT: ...)"``)."""
    first = text.split("\n", 1)[0]
    entry, _, rest = first.partition(": ")
    watched = bool(_WATCH_PREFIX.match(rest))
    rest = _WATCH_PREFIX.sub("", rest)
    code, _, comment = rest.partition("  #")
    hint = comment[comment.find("(HINT: ") + 7:].rstrip(")") if "(HINT: " in comment else ""
    return entry.strip(), " ".join(code.split()), hint.strip(), watched


def failing_guards(recompile: Recompile, explanations: Iterable[Any]) -> list[EntryFailure]:
    """Each failure of ``recompile`` named with the guard of its cache entry that has its code
    (``explanations``: the compiled object's ``FrameExplanations``, one per compile)."""
    by_entry = {}
    for frame_explanations in explanations:
        frame = frame_explanations.frame
        if frame.function == recompile.frame.function and frame.file == recompile.frame.file:
            by_entry[frame.compile_id] = frame_explanations
    out = []
    for text in recompile.failures:
        entry, code, hint, watched = parse_failure(text)
        missing = _MISSING_KEY.match(code)
        if missing:  # the entry read a key its dict no longer has (an adapter deleted)
            out.append(EntryFailure(entry, code, attribute_path(missing.group("dict")), "", missing.group("key"),
                                   hint, watched))
            continue
        name, guard_type = _named(code, by_entry.get(entry, ()))
        compared = _COMPARED.match(code)
        if not name and compared:  # a SHAPE_ENV guard has no name: the value it compares
            name = _AS_TENSOR.sub(r"\1", compared.group("lhs"))
        out.append(EntryFailure(entry, code, name, guard_type, compared.group("rhs") if compared else "", hint,
                               watched))
    return out


def attribute_path(source: str) -> str:
    """A source as attribute reads: ``self.__dict__['_modules']['base_model'].peft_config``
    (torch 2.13) and ``self._modules['base_model'].peft_config`` (2.11) ->
    ``self.base_model.peft_config``."""
    return _DICT_ITEM.sub(r".\1", _MODULE_ITEM.sub(r".\1", source))


def _named(code: str, explanations: Iterable[Any]) -> tuple[str, str]:
    """``(name, guard_type)`` of the explanation whose code is ``code``; for a tensor's
    metadata (``tensor 'x' size mismatch ...``) the tensor's name and ``TENSOR_MATCH``."""
    found = [e for e in explanations if e.code and any(normalized(part) == code for part in e.code.splitlines())]
    if not found:  # a guard of several parts (a SHAPE_ENV guard) printed one part
        found = [e for e in explanations if e.code and code in normalized(e.code)]
    if found:
        value_guard = next((e for e in found if e.guard_type in ("EQUALS_MATCH", "CONSTANT_MATCH")), found[0])
        return value_guard.name, value_guard.guard_type
    tensor = _TENSOR.match(code)
    if tensor:
        return _LOCAL.sub(r"\1", tensor.group("name")), "TENSOR_MATCH"
    return code, ""


def most_failed(recompiles: Iterable[Recompile], explanations: list, function: str = "",
                file: str = "") -> tuple[str, int] | None:
    """``(guard, failures)`` of the guard that failed most often in the recompiles of the
    frame ``function`` at ``file`` (every frame when both are ""), counted over every cache
    entry; None when nothing failed."""
    counts: Counter = Counter()
    types: dict[str, Counter] = {}
    for r in recompiles:
        if (function, file) != ("", "") and (r.frame.function, r.frame.file) != (function, file):
            continue
        for g in failing_guards(r, explanations):
            counts[g.name] += 1  # a float's CONSTANT_MATCH, then its SHAPE_ENV guard: one guard
            types.setdefault(g.name, Counter())[g.guard_type] += 1
    if not counts:
        return None
    name, n = counts.most_common(1)[0]
    kind = types[name].most_common(1)[0][0]
    return (f"{name} ({kind})" if kind else name), n
