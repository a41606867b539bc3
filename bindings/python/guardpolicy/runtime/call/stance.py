"""The stance machine of one compiled object (``CompileStats.stance``) and the call count it
runs on: warm-up (``warmup`` quiet calls: calls since the last one that compiled), then
active (each call runs with torch's ``skip_guard_eval_unsafe``), back to warm-up on a
compile, a recovery (``recovery``) or ``reset``.

It is the object every per-call path counts on, so that a call reads one object: the C
``CallLayer`` (``call_count`` and ``verify_every``, the sampling period it reads beside the
count), the per-call hook ``enter`` (``OptimizeContext.enter_exit_hooks``) and direct
dispatch. Counts are plain ints updated without a lock: calls from several threads at once
may be under-counted.
"""

from __future__ import annotations

from typing import Any, Callable


def _nothing() -> None:
    """What the per-call hook returns when it changed nothing."""


class Stance:
    """``warmup``: the quiet calls before the stance (the ``stance`` line's N), or None (no
    stance line: ``enter`` only counts, for direct dispatch); ``on_recompile``: what a call
    after warm-up that no cache entry accepts does (``recompile``, ``warn``, ``raise``; None
    without a stance line); ``verify_every``: verify samples every N-th call (0: off).
    ``call_count``: the calls counted; ``last_compile_call``: the count at the last compile
    (or reset); ``active``: warm-up is over and calls skip guard evaluation; ``recovering``:
    a recovered call is running again; ``path_counts``: the per-call path (``CallLayer``)
    counts the calls, so ``enter`` does not. Picklable (what a running call set is not kept).
    """

    __slots__ = ("call_count", "verify_every", "warmup", "on_recompile", "active", "last_compile_call",
                 "recovering", "path_counts", "_stanced", "_leave_bound", "_eval_frame")

    #: Not pickled: the running call's torch stance, the bound hook, torch's module.
    _LIVE = ("_stanced", "_leave_bound", "_eval_frame")

    def __init__(self, warmup: int | None, on_recompile: str | None, verify_every: int = 0):
        self.warmup = warmup
        self.on_recompile = on_recompile
        self.verify_every = verify_every
        self.call_count = 0
        self.last_compile_call = 0
        self.active = False
        self.recovering = False
        self.path_counts = False
        self._bind()

    def _bind(self) -> None:
        from .. import torch_internals  # imported with torch: gp.compile checked it is there

        self._stanced: Any = None  # the DynamoStance the running call set the flag on
        self._leave_bound = self._leave
        self._eval_frame = torch_internals.eval_frame

    @property
    def quiet_calls(self) -> int:
        """Calls since the last one that compiled (or the last reset)."""
        return self.call_count - self.last_compile_call

    @property
    def stance_active(self) -> bool:
        """Whether the next call runs with ``skip_guard_eval_unsafe``."""
        return self.active or (self.warmup is not None and self.quiet_calls >= self.warmup)

    def reset(self) -> None:
        """Back to full guard evaluation: the warm-up count starts again."""
        self.active = False
        self.last_compile_call = self.call_count

    def compiled(self) -> None:
        """A frame compiled: the warm-up count starts again."""
        self.last_compile_call = self.call_count

    def begin_recovery(self) -> None:
        """A call after warm-up matched no cache entry: full guard evaluation from this call
        on (``recovering`` until ``end_recovery``), and the warm-up count starts again."""
        self.reset()
        self.recovering = True

    def end_recovery(self) -> None:
        self.recovering = False

    # -- called by torch ------------------------------------------------------------------

    def enter(self) -> Callable[[], None]:
        """The per-call hook (``OptimizeContext.enter_exit_hooks``): counts the call and,
        once warm-up is over, sets ``skip_guard_eval_unsafe`` on torch's current stance for
        this call. Returns what torch calls when the call ends. (With the per-call path, it
        has counted the call already.)"""
        if not self.path_counts:
            self.call_count += 1
        if self.warmup is None:  # direct dispatch without a stance line: only the count
            return _nothing
        if not self.active:
            if self.call_count - 1 - self.last_compile_call < self.warmup:
                return _nothing
            self.active = True
        stance = self._eval_frame._stance  # torch.compiler.set_stance replaces it: read it per call
        if stance.skip_guard_eval_unsafe:  # already set: by torch's set_stance or an outer call
            return _nothing
        stance.skip_guard_eval_unsafe = True
        self._stanced = stance
        return self._leave_bound

    def _leave(self) -> None:
        self._stanced.skip_guard_eval_unsafe = False
        self._stanced = None

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name not in self._LIVE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self._bind()

    def __repr__(self) -> str:
        state = "on" if self.stance_active else f"warm-up {self.quiet_calls}/{self.warmup}"
        return f"<guardpolicy.Stance {state if self.warmup is not None else 'none'}: {self.call_count} calls>"
