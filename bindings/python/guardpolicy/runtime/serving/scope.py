"""``with guardpolicy.serving(compiled):`` — on this thread, a call of ``compiled`` that would
compile raises ``ServeTimeCompile`` naming the guard that failed (or, with
``on_compile="warn"``, compiles and logs it once per guard); other threads keep compiling (a
warm-up thread beside request threads). ``guardpolicy.serving()`` covers every object
``guardpolicy.compile`` returned. Works on torch 2.11 to 2.15 (torch's own
``fail_on_recompile`` stance is process-wide, and its per-thread ``serving()`` is on main only).

Where it is decided: guardpolicy's Dynamo callback of the compiled object
(``guard_filter.ScopedConfigCallback``), which torch calls on a cache miss only, reads one
thread-local (``THREAD``: empty unless this thread is inside a scope) and, inside a scope,
calls ``on_miss`` before it takes Dynamo's compile lock: a request thread never waits for
another thread's compile to learn it would compile. ``on_miss`` asks what Dynamo's callback
would do with the frame (``torch_internals.dynamo_skips``: skip files, frames without tensors,
...; the recompile limit, where torch runs the frame uncompiled) and, when it would compile,
names each cache entry's failing guard on the frame's locals (``check.answer``), counts the
call in ``guardpolicy.stats(compiled).serve_time_compiles`` and raises or warns. A cache hit
costs nothing more: torch does not call the callback.

Objects compiled by a plain ``torch.compile`` are not covered: their misses never reach
guardpolicy.
"""

from __future__ import annotations

import threading
from typing import Any

#: This thread's scopes (``THREAD.scopes``, innermost last); the attribute exists only while
#: one is entered, so the callback's test is one read of this thread's ``__dict__``.
THREAD = threading.local()

ON_COMPILE = ("raise", "warn")
_WARNED: set[tuple[int, str]] = set()
_WARNED_LOCK = threading.Lock()


class ServeTimeCompile(RuntimeError):
    """A call inside ``guardpolicy.serving(...)`` would have compiled. ``answer``: the
    ``WouldRecompile`` of the frame at the miss (each cache entry's failing guard);
    ``guard``: the first failing guard's name (``""`` when the frame had no cache entry)."""

    def __init__(self, answer: Any):
        self.answer = answer
        failures = answer.failures
        self.guard = failures[0].guard if failures else ""
        super().__init__(f"guardpolicy.serving: this call would compile {_said(answer)}; warm it up before "
                         "serving, or let a warm-up thread compile it")


class serving:  # noqa: N801 - a context manager, named as torch names its own
    """``with guardpolicy.serving(compiled, on_compile="raise"):`` (see the module
    docstring). ``compiled``: what ``guardpolicy.compile`` returned (or a module it compiled
    in place); None: every such object. ``on_compile``: ``"raise"`` (``ServeTimeCompile``)
    or ``"warn"`` (compile, and log at WARNING on the ``guardpolicy`` logger once per
    object and failing guard). Scopes nest; the innermost one that covers an object
    decides. Thread-local: entering it on one thread changes nothing on the others. Raises
    TypeError for a ``compiled`` that ``guardpolicy.compile`` did not return, ValueError for
    another ``on_compile``."""

    def __init__(self, compiled: Any = None, on_compile: str = "raise"):
        from ..stats import stats

        if on_compile not in ON_COMPILE:
            raise ValueError(f"on_compile must be one of {', '.join(map(repr, ON_COMPILE))}, not {on_compile!r}")
        try:
            self.stats = stats(compiled) if compiled is not None else None
        except TypeError:
            raise TypeError(f"guardpolicy.serving() covers what guardpolicy.compile returned, not a "
                            f"{type(compiled).__name__} (a plain torch.compile object's cache misses never reach "
                            "guardpolicy)") from None
        self.on_compile = on_compile

    def covers(self, stats: Any) -> bool:
        return self.stats is None or self.stats is stats

    def __enter__(self) -> serving:
        scopes = THREAD.__dict__.setdefault("scopes", [])
        scopes.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        scopes = THREAD.__dict__.get("scopes", [])
        if self in scopes:
            scopes.reverse()
            scopes.remove(self)  # the innermost entry of this scope
            scopes.reverse()
        if not scopes:
            THREAD.__dict__.pop("scopes", None)

    def __repr__(self) -> str:
        what = "every compiled object" if self.stats is None else repr(self.stats)
        return f"<guardpolicy.serving {what}, on_compile={self.on_compile!r}>"


def on_miss(stats: Any, callback: Any, args: tuple) -> None:
    """What guardpolicy's Dynamo callback ``callback`` of the object whose state is ``stats``
    calls on a cache miss while this thread is in a scope: raises ``ServeTimeCompile``, or logs
    and lets the compile go on, when the frame (``args[0]``) would compile."""
    scope = next((s for s in reversed(THREAD.__dict__.get("scopes", ())) if s.covers(stats)), None)
    frame = args[0] if args else None
    if scope is None or frame is None:
        return
    from .. import torch_internals as _tp
    from .check import answer

    if _tp.dynamo_skips(frame):
        return
    code, f_locals = frame.f_code, frame.f_locals
    region = _tp.current_region()
    found = answer(code, _tp.lookup_entries(code, callback, region), f_locals, stats, region)
    if found.runs_eagerly:
        return  # torch runs it uncompiled (recorded in eager_fallbacks)
    counts = stats.counts  # (a Counts unpickled from before the counter has none yet)
    counts.serve_time_compiles = getattr(counts, "serve_time_compiles", 0) + 1
    if scope.on_compile == "raise":
        raise ServeTimeCompile(found)
    _warn_once(stats, found)


def _warn_once(stats: Any, found: Any) -> None:
    from ..logs import log

    guard = found.failures[0].guard if found.failures else "(first compile)"
    key = (id(stats), f"{found.checked_frames[0]}: {guard}")
    with _WARNED_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    log.warning("guardpolicy.serving: a call compiles %s while serving; on_compile='warn' lets it", _said(found))


def _said(found: Any) -> str:
    """``frame (entry 0/0: x (TENSOR_MATCH): expected ..., got ...; ...)``."""
    frame = found.checked_frames[0] if found.checked_frames else "a frame"
    why = "; ".join(f"entry {e.compile_id}: {e.failure}" for e in found.entries if e.failure is not None)
    return f"{frame} ({why or 'it has no cache entry yet'})"
