"""``CompileStats``: guardpolicy's state of one compiled object (``guardpolicy.stats(compiled)``,
``stats``), and the per-call hook that sets the stance after warm-up (``CompileStats.enter``)."""

from __future__ import annotations

from typing import Any, Callable

from ..api.policy import Policy
from ..distributed.agreement import RankAgreement
from .frames import EagerFallback, FrameExplanations
from .logs import log as _log, making_tool_objects
from .verify import REGISTRY, Violation
from .watch import MOVED_TENSORS, Watches, forget_tensors


def _nothing() -> None:
    """What the per-call hook returns when it changed nothing."""


class CompileStats:
    """guardpolicy's state of one compiled object: ``guardpolicy.stats(compiled)``.

    ``compiles``: frames compiled, one per ``guard_filter_fn`` call (graph-break resume
    frames count); ``explanations``: per compiled frame, the decision and deciding rule of
    every guard, and ``frame``, which frame (a ``FrameExplanations``; strings only: no
    reference to live objects). With a ``stance`` line:
    ``calls``, the calls of the compiled object (counted by the per-call hook that sets the
    stance); ``quiet_calls``, calls since the last one that compiled; ``stance_active``, calls
    now run with ``skip_guard_eval_unsafe``; ``on_recompile``, the policy's action for a call
    after warm-up that no cache entry accepts, and ``recoveries``, such calls that compiled
    with every guard (``guardpolicy.runtime.call.recovery``). Without one, guardpolicy adds nothing to a
    call and ``calls`` and ``quiet_calls`` are None. Counts are plain ints updated without a lock:
    calls from several threads at once may be under-counted. Picklable; copied with the
    compiled object. ``ranks``: the agreement across ``torch.distributed`` ranks (a
    ``RankAgreement``, see guardpolicy.distributed.agreement). ``tool_object``: made by one of
    guardpolicy's tools for itself (inside ``logs.tool_objects()``): its stance recoveries are
    neither logged nor warned about. ``watches``: the guards it watches rather than checks on
    every call (a ``watch.Watches``; not pickled: a copy watches what it compiles itself).
    ``eager_fallbacks``: each frame torch stopped compiling at a recompile limit (an
    ``EagerFallback``), logged at WARNING when it happens: a call that none of that frame's
    cache entries accepts runs it eagerly from then on.
    """

    __slots__ = ("policy", "compiles", "explanations", "dispatch", "ranks", "verify_every", "on_violation",
                 "dry_run", "violations", "verified_calls", "unverified_calls", "dry_run_events",
                 "on_recompile", "recoveries", "_recovering", "_path_counts", "tool_object",
                 "_active", "call_count", "_warmup", "_last_compile_call", "guards", "_stanced",
                 "_leave_bound", "_eval_frame", "watches", "eager_fallbacks", "config_overrides")

    #: Not pickled (live torch objects; ``guards`` is the process's ``verify.REGISTRY``).
    _LIVE = ("guards", "_stanced", "_leave_bound", "_eval_frame", "watches")

    def __init__(self, policy: Policy, verify_every: int = 0, on_violation: str = "recompile",
                 dry_run: bool = False, ranks: RankAgreement | None = None):
        self.policy = policy
        self.ranks = ranks if ranks is not None else RankAgreement()
        self.compiles = 0
        self.explanations: list[FrameExplanations] = []
        self.dispatch: Any = None  # a dispatch.DirectDispatch with dispatch="direct"
        self.verify_every = verify_every
        self.on_violation = on_violation
        self.dry_run = dry_run
        self.violations: list[Violation] = []
        self.verified_calls = 0
        self.unverified_calls = 0
        self.dry_run_events: list[Any] = []  # dry_run.DryRunEvent objects
        self.eager_fallbacks: list[EagerFallback] = []
        #: config knobs in force over the policy's own lines (a module compiled in place: no free tensors)
        self.config_overrides: dict[str, Any] = {}
        self.guards = REGISTRY
        self.watches = Watches()
        self._active = False
        self._warmup = policy.stance_warmup
        #: what a call after warm-up that no cache entry accepts does (``guardpolicy.runtime.call.recovery``)
        self.on_recompile = (getattr(policy, "on_recompile", None) or "recompile") if self._warmup else None
        self.recoveries = 0  # such calls recovered from: compiled with every guard, warm-up again
        self._recovering = False
        self.tool_object = making_tool_objects()
        self._path_counts = False  # whether the per-call path counts the calls (else ``enter``)
        self.call_count = 0
        self._last_compile_call = 0
        self._stanced: Any = None  # the DynamoStance the running call set the flag on
        self._leave_bound = self._leave
        self._path_counts = self.needs_call_path
        from . import torch_internals  # imported with torch: gp.compile checked it is there

        self._eval_frame = torch_internals.eval_frame

    def set_dispatch(self, dispatch: Any) -> None:
        """Direct dispatch (a ``dispatch.DirectDispatch``) for this object's calls; then no
        call goes through the per-call path that recovers."""
        self.dispatch = dispatch
        self._path_counts = self.needs_call_path

    @property
    def needs_call_hook(self) -> bool:
        """Whether calls need guardpolicy's per-call hook (a stance line, or direct dispatch,
        which counts quiet calls)."""
        return self._warmup is not None or self.dispatch is not None

    @property
    def needs_call_path(self) -> bool:
        """Whether calls go through guardpolicy's per-call path (``call_path.CallPath``): verify, or
        a stance that recovers (``on_recompile`` recompile or warn; not with direct dispatch)."""
        return bool(self.verify_every) or self.recovers

    @property
    def recovers(self) -> bool:
        """Whether a call after warm-up that no cache entry accepts compiles (``recovery``)."""
        return self.on_recompile in ("recompile", "warn") and self.dispatch is None

    @property
    def warmup(self) -> int | None:
        """The quiet calls before the stance (the ``stance`` line's N), or None."""
        return self._warmup

    @property
    def calls(self) -> int | None:
        return self.call_count if self.needs_call_hook or self.needs_call_path else None

    @property
    def quiet_calls(self) -> int | None:
        counted = self.needs_call_hook or self.needs_call_path
        return self.call_count - self._last_compile_call if counted else None

    @property
    def stance_active(self) -> bool:
        """Whether the next call runs with ``skip_guard_eval_unsafe``."""
        return self._active or (self._warmup is not None and self.quiet_calls >= self._warmup)

    @property
    def config(self) -> dict[str, Any]:
        """The Dynamo config knobs (``torch_internals.config_patch``) in force while this object's frames compile."""
        return self.policy.config

    def config_for(self, code: Any) -> dict[str, Any]:
        """``config`` for a compile of ``code``: ``install_free_tensors`` off once a recheck
        found that code's installed tensors replaced (``watch.MOVED_TENSORS``), while Dynamo
        holds cache entries of it (``torch.compiler.reset()`` starts it afresh)."""
        from . import torch_internals

        config = {**self.policy.config, **self.config_overrides} if self.config_overrides else self.policy.config
        if not config.get("install_free_tensors") or code is None:
            return config
        if not torch_internals.cache_entries_of(code):
            forget_tensors(code)
        elif code in MOVED_TENSORS:
            return {**config, "install_free_tensors": False}
        return config

    def reset_stance(self) -> None:
        """Back to full guard evaluation; the warm-up count starts again (and direct dispatch
        drops its capture until the warm-up ends)."""
        self._active = False
        self._last_compile_call = self.call_count
        if self.dispatch is not None:
            self.dispatch.reset()

    # -- called by torch ------------------------------------------------------------------

    def enter(self) -> Callable[[], None]:
        """The per-call hook (``OptimizeContext.enter_exit_hooks``): counts the call and,
        once warm-up is over, sets ``skip_guard_eval_unsafe`` on torch's current stance for
        this call. Returns what torch calls when the call ends. (With verify, the per-call
        path has counted the call already.)"""
        if not self._path_counts:
            self.call_count += 1
        if self._warmup is None:  # direct dispatch without a stance line: only the count
            return _nothing
        if not self._active:
            if self.call_count - 1 - self._last_compile_call < self._warmup:
                return _nothing
            self._active = True
        stance = self._eval_frame._stance  # torch.compiler.set_stance replaces it: read it per call
        if stance.skip_guard_eval_unsafe:  # already set: by torch's set_stance or an outer call
            return _nothing
        stance.skip_guard_eval_unsafe = True
        self._stanced = stance
        return self._leave_bound

    def _leave(self) -> None:
        self._stanced.skip_guard_eval_unsafe = False
        self._stanced = None

    def begin_recovery(self) -> None:
        """A call after warm-up matched no cache entry (``guardpolicy.runtime.call.recovery``): full guard
        evaluation from this call on, and the warm-up count starts again."""
        self.recoveries += 1
        self._active = False
        self._last_compile_call = self.call_count
        self._recovering = True

    def end_recovery(self) -> None:
        self._recovering = False

    def record_compile(self, explanations: FrameExplanations) -> None:
        if self._recovering and not self.tool_object:  # once per new cache entry
            _log.warning("guardpolicy: call %d of %r after warm-up matched no cache entry of %s; compiled a new "
                         "one with every guard evaluated (recovery %d); the stance returns after %d quiet calls",
                         self.call_count, self.policy.name, explanations.frame, self.recoveries, self._warmup)
        self.compiles += 1
        self._last_compile_call = self.call_count
        self.explanations.append(explanations)

    def record_eager_fallback(self, fallback: EagerFallback) -> None:
        """torch stopped compiling a frame of this object at a recompile limit (seen by the
        scoped callback, once per frame, at compile time): recorded and logged."""
        self.eager_fallbacks.append(fallback)
        _log.warning("guardpolicy: %s of policy %r falls back to eager: torch._dynamo hit config.%s (%s), last "
                     "reason: %s; from now on a call that none of its cache entries accepts runs it uncompiled "
                     "(gp.stats(compiled).eager_fallbacks; raise torch._dynamo.config.%s, or make the input that "
                     "varies dynamic)",
                     fallback.frame, self.policy.name, fallback.limit, fallback.value,
                     fallback.last_reason or "not recorded", fallback.limit)

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name not in self._LIVE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_calls" in state:  # pickled before the count was public
            state["call_count"] = state.pop("_calls")
        self.dispatch = None
        self.tool_object = False  # pickled before the flag existed
        self.eager_fallbacks = []  # pickled before the list existed
        self.config_overrides = {}  # pickled before overrides existed
        for name, value in state.items():
            setattr(self, name, value)
        self.guards = REGISTRY
        self.watches = Watches()
        self._stanced = None
        self._recovering = False
        self._leave_bound = self._leave
        from . import torch_internals

        self._eval_frame = torch_internals.eval_frame

    def __repr__(self) -> str:
        calls = f"{self.call_count} calls, " if self.needs_call_hook else ""
        return (f"<guardpolicy.CompileStats {self.policy.name!r}: {calls}{self.compiles} compiles, "
                f"stance {'on' if self.stance_active else 'off'}>")


#: Where a compiled object keeps its ``CompileStats`` (an attribute of a ``GuardPolicyModule``
#: or of the function ``guardpolicy.compile`` returns).
ATTR = "_guardpolicy"


def stats(compiled: Any) -> CompileStats:
    """guardpolicy's state of what ``guardpolicy.compile`` returned (calls, compiles,
    stance, explanations), or of a module it compiled in place (``inplace=True``). Raises
    TypeError for anything else."""
    own = getattr(compiled, "__dict__", {})
    if ATTR not in own:  # a module compiled in place: its compiled call holds them
        own = getattr(own.get("_compiled_call_impl"), "__dict__", {})
    found = own.get(ATTR)
    if not isinstance(found, CompileStats):
        raise TypeError(f"guardpolicy.stats() takes what guardpolicy.compile returned, "
                        f"not {type(compiled).__name__}")
    return found
