"""``guardpolicy.would_recompile``: whether a call would be served by a cache entry of a
compiled object's first frame, asked without running the model and without compiling.

The frame locals are bound as the frame will hold them (``frame.TopFrame.bind``); each cache
entry of the frame, in torch's lookup order (``torch_internals.lookup_entries``: its region,
its backend), is asked with torch's own guard manager (``check``; for a failing entry
``check_verbose``, as torch's recompile reasons are made), and the first that passes serves
the call. guardpolicy's runtime is in those managers: a watch gate is a guard of the kept
manager (``runtime.watch``), so its verdict for this call is part of the check, and direct
dispatch decides a hit by the same check. What a gate reads does not change between this
check and the call, so the answer is the call's. Under a policy's stance
(``skip_guard_eval_unsafe`` after warm-up) an entry is asked for its differentiating guards
only, as torch's lookup asks it then.

What it cannot see: the frames after a graph break (their locals exist only once the first
graph ran; the record lists them, ``unchecked_frames``), forward pre-hooks of the compiled
module that change the arguments, verify's sampled call (``verify every N calls`` may find a
dropped guard failing and compile) and a global ``torch.compiler.set_stance``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..frames import CompiledFrame, code_frame
from .frame import TopFrame, top_frame
from .naming import GuardFailure, name_failure

@dataclasses.dataclass(slots=True)
class EntryCheck:
    """What one cache entry of the first frame says of the call: ``compile_id`` (``"0/1"``),
    ``passes`` (it would serve the call), and when no entry serves it, ``failure`` (a
    ``GuardFailure``; None for the entries tried before the one that serves: nothing is named
    when nothing compiles). ``failing_guard``, ``expected`` and ``got`` are the failure's
    (``""`` without one)."""

    compile_id: str
    passes: bool
    failure: GuardFailure | None = None

    @property
    def failing_guard(self) -> str:
        return self.failure.guard if self.failure is not None else ""

    @property
    def expected(self) -> str:
        return self.failure.expected if self.failure is not None else ""

    @property
    def got(self) -> str:
        return self.failure.got if self.failure is not None else ""

    def __str__(self) -> str:
        if self.passes:
            return f"{self.compile_id}: serves the call"
        return f"{self.compile_id}: {self.failure if self.failure is not None else 'does not serve the call'}"


@dataclasses.dataclass(slots=True)
class WouldRecompile:
    """The answer of ``guardpolicy.would_recompile``.

    ``would_compile``: the call would compile the first frame (no cache entry serves it, and
    the frame is not at its recompile limit); ``served_by``: the compile id of the entry that
    would serve it (``None`` otherwise); ``entries``: per cache entry tried, in torch's lookup
    order, an ``EntryCheck`` (up to the one that serves; each failing guard named when none
    serves); ``frame``: the first frame (a
    ``CompiledFrame``); ``checked_frames`` and ``unchecked_frames``: the frames checked (the
    first) and the frames that run after a graph break, which cannot be checked without
    running the first graph (labels ``function at file:line``); ``runs_eagerly``: no entry
    serves and torch would run the frame uncompiled (its recompile limit); ``stance``: the
    entries were asked for their differentiating guards only (the policy's stance is active)."""

    would_compile: bool
    served_by: str | None
    entries: tuple[EntryCheck, ...]
    frame: CompiledFrame
    checked_frames: tuple[str, ...]
    unchecked_frames: tuple[str, ...] = ()
    runs_eagerly: bool = False
    stance: bool = False

    @property
    def failures(self) -> tuple[GuardFailure, ...]:
        """The failing guard of each entry that does not serve the call."""
        return tuple(e.failure for e in self.entries if e.failure is not None)

    def __str__(self) -> str:
        where = _where(self.frame)
        if self.served_by is not None:
            head = f"served by cache entry {self.served_by} of {where}"
        elif not self.entries:
            head = f"would compile {where}: it has no cache entry yet"
        else:
            n = len(self.entries)
            verdict = "would run eagerly (recompile limit)" if self.runs_eagerly else "would compile"
            head = f"{verdict} {where}: none of its {n} cache entr{'y' if n == 1 else 'ies'} serves the call"
        lines = [head + (" (stance: differentiating guards only)" if self.stance else "")]
        lines += [f"  {e}" for e in self.entries if e.failure is not None]
        if self.unchecked_frames:
            lines.append(f"  not checked (after a graph break): {', '.join(self.unchecked_frames)}")
        return "\n".join(lines)


def would_recompile(compiled: Any, *args: Any, **kwargs: Any) -> WouldRecompile:
    """Whether calling ``compiled(*args, **kwargs)`` now would compile its first frame,
    without running the model and without compiling (see the module docstring).
    ``compiled``: what ``guardpolicy.compile`` or ``torch.compile`` returned. Ambient state
    (grad mode, autocast, the default dtype) is read as it is now: ask under the state the
    call will run in. Raises TypeError when ``compiled`` is not a compiled object with a
    Python first frame, or when the arguments do not bind to the frame's signature (as the
    call would); RuntimeError on a torch without what this needs."""
    frame = top_frame(compiled)
    return check_frame(frame, frame.bind(args, kwargs))


def check_frame(frame: TopFrame, f_locals: dict[str, Any]) -> WouldRecompile:
    """``would_recompile`` for the frame locals ``f_locals`` of ``frame``'s first frame."""
    _tp = _torch()
    stats, ctx, code = frame.stats, frame.ctx, frame.function.__code__
    stance = stats is not None and stats.stance_active
    region = _tp.region_of(ctx)
    return answer(code, _tp.lookup_entries(code, ctx.callback, region), f_locals, stats, region, stance)


def answer(code: Any, entries: list, f_locals: dict[str, Any], stats: Any, region: int = -1,
           stance: bool = False) -> WouldRecompile:
    """The ``WouldRecompile`` of a frame of ``code`` whose cache entries torch tries are
    ``entries`` (``torch_internals.lookup_entries``) for a call with ``f_locals``;
    ``stats``: the compiled object's ``CompileStats`` (None for a plain ``torch.compile``);
    ``stance``: entries asked for their differentiating guards only."""
    tp = _torch()
    passes = tp.passes
    served, checks = None, []
    for entry in entries:
        if passes(entry.manager, f_locals, stance):
            served = entry
            checks.append(EntryCheck(entry.compile_id, True))
            break
        checks.append(EntryCheck(entry.compile_id, False))  # not named while an entry serves: nothing compiles
    if served is None:
        checks = [EntryCheck(e.compile_id, False, _failure(e, f_locals, stats)) for e in entries]
    eager = served is None and bool(entries) and tp.at_recompile_limit(code, region, f_locals)
    label, where = _label(code)
    return WouldRecompile(served is None and not eager, served.compile_id if served is not None else None,
                          tuple(checks), label, where, _unchecked(stats, served, label), eager, stance)


_LABELS: dict[Any, tuple[CompiledFrame, tuple[str]]] = {}


def _label(code: Any) -> tuple[CompiledFrame, tuple[str]]:
    """``code_frame(code)`` and its ``(_where(...),)``, made once per code object (a few
    hundred kept at most)."""
    found = _LABELS.get(code)
    if found is None:
        if len(_LABELS) > 256:
            _LABELS.clear()
        label = code_frame(code)
        found = _LABELS[code] = (label, (_where(label),))
    return found


def _where(frame: CompiledFrame) -> str:
    return f"{frame.function} at {frame.file}:{frame.line}" if frame.file else frame.function


_TP: list = []


def _torch() -> Any:
    """``torch_internals`` (imported with torch on first use), checked once for what this
    needs. Raises RuntimeError on a torch without it."""
    if not _TP:
        from .. import torch_internals as _tp

        if absent := _tp.missing_for_serving():
            raise RuntimeError(f"guardpolicy.would_recompile needs {', '.join(absent)}, which this torch lacks"
                               f"{_tp.DOCTOR_HINT}")
        _TP.append(_tp)
    return _TP[0]


def _failure(entry: Any, f_locals: dict[str, Any], stats: Any) -> GuardFailure:
    """The failing guard of ``entry`` on ``f_locals``, named with its explanations."""
    parts = _torch().failing_parts(entry.manager, f_locals)
    if not parts:  # the full check passes where the stance's did not, or torch said nothing
        return GuardFailure("(unknown)", "", "", "", "torch's guard manager named no failing guard")
    explained = None
    plans: list = []
    if stats is not None:
        explained = next((f for f in stats.explanations if f.frame.compile_id == entry.compile_id), None)
        plans = stats.watches.frames
    return name_failure(parts[0], explained, entry.manager, f_locals, plans)


def _unchecked(stats: Any, served: Any, first: CompiledFrame) -> tuple[str, ...]:
    """The frames that run after a graph break: the continuations the serving entry's code
    calls, and the other frames the object compiled (``explain``)."""
    names = list(served.resumes) if served is not None else []
    if stats is not None:
        for explained in stats.explanations:
            f = explained.frame
            if f.line != first.line or f.function != first.function or f.file != first.file:
                label = _where(f)
                if label not in names and not any(label.startswith(n + " at ") for n in names):
                    names.append(label)
    return tuple(n for n in names if not any(m.startswith(n + " at ") for m in names))
