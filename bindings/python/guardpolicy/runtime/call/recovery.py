"""The stance that recovers: a call after warm-up that no cache entry accepts compiles.

Under the ``skip_guard_eval_unsafe`` stance torch runs only each cache entry's
differentiating guards, and when none accepts a call it raises "Recompilation triggered with
skip_guard_eval_unsafe stance" instead of compiling. ``CallPath`` (the per-call path, in C)
hands such a failure to ``recover``: when the miss happened before any of the user's code ran
(the first frame of the call: every traceback frame is torch's), the object leaves the stance,
the same call runs again with every guard evaluated (so it compiles a new cache entry, logged
once), and the warm-up count starts again: after the stance line's N quiet calls the stance is
back on. The policy's ``on_recompile`` line says what happens: ``recompile`` (the default),
``warn`` (the same, with a ``StanceRecompileWarning``), ``raise`` (torch's RuntimeError, as
its ``fail_on_recompile`` stance; the path is not installed for it). A tool's own object
(``logs.tool_objects``) recovers the same way, silently.

A miss inside a later frame of the call (after a graph break: part of the function has run)
is not retried, since running the first part twice would repeat its side effects: torch's
error propagates (docs/language.md says so), but the object leaves the stance, so that the
next call evaluates every guard and compiles (and the stance returns after the warm-up).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

from ...api.errors import StanceRecompileWarning

_log = logging.getLogger("guardpolicy")  # calls.log: the logger violations go to


def before_user_code(exc: BaseException) -> bool:
    """Whether every frame ``exc`` passed through is torch's: the lookup of the call's first
    frame failed, before any of the user's code ran, so running the call again is safe."""
    from ..torch_internals import TORCH_DIR

    tb = exc.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(TORCH_DIR):
            return False
        tb = tb.tb_next
    return True


def recover(stats: Any, inner: Callable, exc: BaseException, args: tuple, kwargs: dict) -> Any:
    """What the per-call path does when ``inner`` (torch's compiled callable) raised ``exc``:
    re-raises it unless it is a stance miss this object may recover from; else runs the call
    again with every guard (``stats.begin_recovery``) and returns its result."""
    from ..torch_internals import is_stance_miss

    if stats.on_recompile not in ("recompile", "warn") or not is_stance_miss(exc):
        raise exc
    if not before_user_code(exc):
        stats.reset_stance()  # this call raises; the next one evaluates every guard
        if not stats.tool_object:  # a tool's own object (logs.tool_objects) does not speak to the user
            _log.warning("guardpolicy: call %s of %r missed every cache entry after a graph break, once part of "
                         "it had run: it raises torch's error (running it again would repeat that part); the "
                         "next call evaluates every guard", stats.calls, stats.policy.name)
        raise exc
    stats.begin_recovery()
    if stats.on_recompile == "warn" and not stats.tool_object:
        warnings.warn(f"guardpolicy: call {stats.calls} of {stats.policy.name!r} after warm-up matched no cache "
                      f"entry; it compiles with every guard and the stance returns after {stats.warmup} quiet calls",
                      StanceRecompileWarning, stacklevel=2)
    try:
        return inner(*args, **kwargs)
    finally:
        stats.end_recovery()
