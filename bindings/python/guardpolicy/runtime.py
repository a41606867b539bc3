"""``guardpolicy.compile``: ``torch.compile`` with a policy as ``guard_filter_fn``, its config
knobs and its stance, at no cost on calls that do not compile.

* The policy is passed as ``guard_filter_fn`` (on a copy of ``options``: torch pops the key
  from the dict it is given). A ``guard_filter_fn`` already in ``options`` is refused.
* Its ``config`` lines (``install_free_tensors``, ``use_recursive_dict_tags_for_guards``, ...,
  declared in the schema's ``config:``) are in force while *this* object's frames compile,
  and only then: the Dynamo callback of this object's ``OptimizeContext`` (which the
  eval-frame hook calls on a cache miss, never on a cache hit) runs under
  ``torch._dynamo.config.patch`` and Dynamo's compile lock. Recompiles long after warm-up
  (a new shape) see them too; other compiled objects, in this thread or another, never do.
* Many ranks: the same callback agrees on the policy across ``torch.distributed`` ranks at
  the first compile, and ``guard_filter_fn`` on each frame's decisions with ``check_ranks``
  (``guardpolicy.ranks``); with verify, the ranks agree on each verified call's outcome
  (``guardpolicy.rank_verdicts``, the per-call path's ``agree``; nothing on other calls).
* Its ``stance skip_guard_eval_unsafe after N calls`` line: once N consecutive calls of this
  object compiled nothing, its calls run with torch's ``skip_guard_eval_unsafe`` stance. One
  per-call hook of this object's ``OptimizeContext`` (``enter_exit_hooks``, which torch runs
  before it reads the stance) sets the current stance's flag for the call and restores it
  after; calls of other compiled objects keep full guard evaluation. A compile during
  warm-up restarts the count; ``stats(compiled).reset_stance()`` goes back to warm-up.
  The flag is process-wide while the call runs, as ``torch.compiler.set_stance`` is: a
  compiled function of another thread called at that moment also skips guard evaluation.

For an ``nn.Module`` the result is a ``GuardPolicyModule``, an ``OptimizedModule`` (what
``torch.compile`` returns) that keeps the policy through ``.eval()``, ``.train()``, ``.to()``,
``copy.deepcopy`` and pickling; for a function, ``torch.compile``'s function. guardpolicy's
own state is in ``guardpolicy.stats(compiled)``, never in the model's attributes.

The private torch names this needs are in ``_torch_private`` (torch 2.13 and 2.14).
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Callable

from .calls import CallPath, log as _log
from .dryrun import DryRunEvent, attribute, report_at_exit
from .errors import PolicyRuntimeWarning
from .frames import FrameExplanations, compiled_frame
from .loading import load
from .policy import Policy
from .verify import ACTIONS, REGISTRY, DroppedIndex, FrameGuards, Violation
from .rank_verdicts import VerdictAgreement
from .ranks import DEFAULT_TIMEOUT_S, RankAgreement, check_group

_INDUCTOR = "inductor"
_ATTR = "_guardpolicy"  # where a compiled object keeps its CompileStats


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
    now run with ``skip_guard_eval_unsafe``. Without one, guardpolicy adds nothing to a call
    and ``calls`` and ``quiet_calls`` are None. Counts are plain ints updated without a lock:
    calls from several threads at once may be under-counted. Picklable; copied with the
    compiled object. ``ranks``: the agreement across ``torch.distributed`` ranks (a
    ``RankAgreement``, see guardpolicy.ranks).
    """

    __slots__ = ("policy", "compiles", "explanations", "dispatch", "ranks", "verify_every", "on_violation",
                 "dry_run", "violations", "verified_calls", "unverified_calls", "dry_run_events",
                 "_active", "_calls", "_warmup", "_last_compile_call", "guards", "_stanced",
                 "_leave_bound")

    #: Not pickled (live torch objects; ``guards`` is the process's ``verify.REGISTRY``).
    _LIVE = ("guards", "_stanced", "_leave_bound")

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
        self.dry_run_events: list[DryRunEvent] = []
        self.guards = REGISTRY
        self._active = False
        stance = policy.stance
        self._warmup = stance[1] if stance and stance[0] == "skip_guard_eval_unsafe" else None
        self._calls = 0
        self._last_compile_call = 0
        self._stanced: Any = None  # the DynamoStance the running call set the flag on
        self._leave_bound = self._leave

    @property
    def needs_call_hook(self) -> bool:
        """Whether calls need guardpolicy's per-call hook (a stance line, or direct dispatch,
        which counts quiet calls)."""
        return self._warmup is not None or self.dispatch is not None

    @property
    def needs_call_path(self) -> bool:
        """Whether calls go through guardpolicy's per-call path (``calls.CallPath``): verify."""
        return bool(self.verify_every)

    @property
    def calls(self) -> int | None:
        return self._calls if self.needs_call_hook or self.needs_call_path else None

    @property
    def quiet_calls(self) -> int | None:
        counted = self.needs_call_hook or self.needs_call_path
        return self._calls - self._last_compile_call if counted else None

    @property
    def stance_active(self) -> bool:
        """Whether the next call runs with ``skip_guard_eval_unsafe``."""
        return self._active or (self._warmup is not None and self.quiet_calls >= self._warmup)

    @property
    def config(self) -> dict[str, Any]:
        """The ``torch._dynamo.config`` knobs in force while this object's frames compile."""
        return self.policy.config

    def reset_stance(self) -> None:
        """Back to full guard evaluation; the warm-up count starts again (and direct dispatch
        drops its capture until the warm-up ends)."""
        self._active = False
        self._last_compile_call = self._calls
        if self.dispatch is not None:
            self.dispatch.reset()

    # -- called by torch ------------------------------------------------------------------

    def enter(self) -> Callable[[], None]:
        """The per-call hook (``OptimizeContext.enter_exit_hooks``): counts the call and,
        once warm-up is over, sets ``skip_guard_eval_unsafe`` on torch's current stance for
        this call. Returns what torch calls when the call ends. (With verify, the per-call
        path has counted the call already.)"""
        if not self.verify_every:
            self._calls += 1
        if self._warmup is None:  # direct dispatch without a stance line: only the count
            return _nothing
        if not self._active:
            if self._calls - 1 - self._last_compile_call < self._warmup:
                return _nothing
            self._active = True
        stance = _tp.eval_frame._stance  # torch.compiler.set_stance replaces it: read it per call
        if stance.skip_guard_eval_unsafe:  # already set: by torch's set_stance or an outer call
            return _nothing
        stance.skip_guard_eval_unsafe = True
        self._stanced = stance
        return self._leave_bound

    def _leave(self) -> None:
        self._stanced.skip_guard_eval_unsafe = False
        self._stanced = None

    def record_compile(self, explanations: FrameExplanations) -> None:
        self.compiles += 1
        self._last_compile_call = self._calls
        self.explanations.append(explanations)

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name not in self._LIVE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.dispatch = None
        for name, value in state.items():
            setattr(self, name, value)
        self.guards = REGISTRY
        self._stanced = None
        self._leave_bound = self._leave

    def __repr__(self) -> str:
        calls = f"{self._calls} calls, " if self.needs_call_hook else ""
        return (f"<guardpolicy.CompileStats {self.policy.name!r}: {calls}{self.compiles} compiles, "
                f"stance {'on' if self.stance_active else 'off'}>")


class GuardFilter:
    """The ``guard_filter_fn`` that ``guardpolicy.compile`` passes: the policy's decisions,
    and per compiled frame an explanation recorded in ``stats`` (compile time only: it
    costs a second pass over the entries). Picklable."""

    def __init__(self, stats: CompileStats):
        self.stats = stats

    def __call__(self, entries) -> list[bool]:
        stats = self.stats
        policy = stats.policy
        decisions = policy(entries)
        with warnings.catch_warnings():  # the first pass warned already, if at all
            warnings.simplefilter("ignore", PolicyRuntimeWarning)
            explanations = FrameExplanations(policy.explain(entries), compiled_frame())
        stats.record_compile(explanations)
        stats.ranks.after_frame(explanations)  # check_ranks: raises RankMismatchError
        if stats.verify_every:
            torch_locals = _tp.compiling_frame_locals()
            index = DroppedIndex.of(entries, explanations, explanations.frame)
            stats.guards.add(torch_locals["self"], FrameGuards(torch_locals["guard_manager"], index))
        elif stats.dry_run:
            return self._dry_run(entries, decisions, explanations)
        return decisions

    def _dry_run(self, entries, decisions: list[bool], explanations: FrameExplanations) -> list[bool]:
        """Dry-run: attributes this compile if the policy would have served stale instead,
        builds the manager the policy would have kept (torch's builder) and keeps all."""
        stats = self.stats
        torch_locals = _tp.compiling_frame_locals()
        event = attribute(stats.guards, torch_locals, explanations.frame, _tp, stats.ranks.rank)
        if event is not None:
            stats.dry_run_events.append(event)
            _log.warning("guardpolicy dry-run: %s", event)
        kept = [entry.orig_guard for entry, keep in zip(entries, decisions) if keep]
        policy_manager = _tp.build_guard_manager(torch_locals["self"], kept, torch_locals, stats.policy)
        index = DroppedIndex.of(entries, explanations, explanations.frame)
        stats.guards.add(torch_locals["self"], FrameGuards(None, index, policy_manager))
        return [True] * len(entries)


class ScopedConfigCallback:
    """Dynamo's callback of one compiled object, run with the policy's config knobs patched
    and Dynamo's compile lock held (so no other thread compiles under them). Only a cache
    miss calls it. It carries the wrapped callback's ``_torchdynamo_orig_backend``, which
    Dynamo's C side reads to pick the cache entries of a backend.

    Before anything compiles, the first call agrees on the policy across ``torch.distributed``
    ranks (``RankAgreement.before_compile``). A ``RankMismatchError`` raised inside the
    compile (``check_ranks``), which Dynamo wraps as an ``InternalTorchDynamoError``, comes
    out as itself."""

    def __init__(self, inner: Callable, stats: CompileStats):
        self.inner = inner
        self.stats = stats
        self._torchdynamo_orig_backend = inner._torchdynamo_orig_backend

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ranks = self.stats.ranks
        with _tp.compile_lock():
            ranks.before_compile(self.stats.policy)
            try:
                with _tp.dynamo_config().patch(**self.stats.config):
                    return self.inner(*args, **kwargs)
            except Exception:
                if ranks.error is not None:
                    raise ranks.error from None
                raise


def _install(ctx: Any, stats: CompileStats) -> None:
    """Adds the per-call hook and the scoped callback (config lines, the agreement across
    ranks) to ``ctx`` (the ``OptimizeContext``). Idempotent: a deep copy or an unpickled
    context may carry the callback already. A disabled compile (``disable=True``) has no
    callback to wrap."""
    if stats.needs_call_hook:
        hooks = _tp.hooks_of(ctx)
        if not any(getattr(h, "__self__", None) is stats for h in hooks):
            hooks.append(stats.enter)
    if callable(ctx.callback) and not isinstance(ctx.callback, ScopedConfigCallback):
        ctx.callback = ScopedConfigCallback(ctx.callback, stats)
    if stats.dispatch is not None:
        stats.dispatch.bind_context(ctx)


def _rebuild_module(mod: Any, ctx: Any, stats: CompileStats) -> Any:
    """Unpickling and ``copy.deepcopy`` of a ``GuardPolicyModule``."""
    if stats.dispatch is not None:
        _dispatch().require()
    _install(ctx, stats)
    return _module_class(direct=stats.dispatch is not None)(mod, ctx, stats)


_MODULE_CLASS: type | None = None
_DIRECT_MODULE_CLASS: type | None = None


def _module_class(direct: bool = False) -> type:
    """``GuardPolicyModule`` (or, for direct dispatch, its subclass whose ``__call__``
    dispatches), made on first use (importing guardpolicy does not import torch)."""
    global _MODULE_CLASS, _DIRECT_MODULE_CLASS
    if _MODULE_CLASS is None:
        _MODULE_CLASS = _make_module_class(_tp.OptimizedModule)
        _DIRECT_MODULE_CLASS = _make_direct_module_class(_MODULE_CLASS, _tp.OptimizedModule.__call__)
    return _DIRECT_MODULE_CLASS if direct else _MODULE_CLASS


def _dispatch() -> Any:
    from . import dispatch

    return dispatch


def _make_module_class(base: type) -> type:
    class GuardPolicyModule(base):  # type: ignore[misc, valid-type]
        """``torch.compile``'s ``OptimizedModule`` with a policy: everything torch's result
        does (``isinstance(m, nn.Module)``, ``.eval()`` returns it, ``state_dict()``,
        ``dir()``, deepcopy, pickle), plus ``guardpolicy.stats(m)``."""

        _guardpolicy: CompileStats | None = None  # a class attribute: set on the instance

        def __init__(self, mod: Any, dynamo_ctx: Any, stats: CompileStats):
            super().__init__(mod, dynamo_ctx)
            self._guardpolicy = stats
            if stats.needs_call_path:  # torch's compiled forward, called through the path
                self.forward = _call_path(self.forward, stats, module=mod)

        def __reduce__(self):
            return (_rebuild_module, (self._orig_mod, self.dynamo_ctx, self._guardpolicy))

        def __repr__(self) -> str:
            return super().__repr__().replace("OptimizedModule", "GuardPolicyModule", 1)

    GuardPolicyModule.__module__ = __name__
    GuardPolicyModule.__qualname__ = "GuardPolicyModule"
    return GuardPolicyModule


def _make_direct_module_class(base: type, normal_call: Callable) -> type:
    class GuardPolicyModule(base):  # type: ignore[misc, valid-type]
        """A ``GuardPolicyModule`` with direct dispatch (``guardpolicy.dispatch``)."""

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return self._guardpolicy.dispatch.call_module(self, normal_call, args, kwargs)

    GuardPolicyModule.__module__ = __name__
    GuardPolicyModule.__qualname__ = "GuardPolicyModule"
    return GuardPolicyModule


def __getattr__(name: str) -> Any:  # guardpolicy.runtime.GuardPolicyModule, for pickle
    if name == "GuardPolicyModule":
        return _module_class()
    raise AttributeError(name)


_DISPATCH_MODES = ("direct",)


def _dispatch_mode(policy: Policy, dispatch: str | None) -> str | None:
    """``dispatch`` or, when None, the policy's ``dispatch`` line. Raises ValueError for an
    unknown mode."""
    mode = dispatch if dispatch is not None else getattr(policy, "dispatch", None)
    if mode is not None and mode not in _DISPATCH_MODES:
        raise ValueError(f"dispatch={mode!r}: the dispatch modes are {', '.join(map(repr, _DISPATCH_MODES))}")
    return mode


def _function_with_dispatch(compiled: Callable, fn: Callable, stats_: CompileStats) -> Callable:
    """What ``guardpolicy.compile`` returns for a function with direct dispatch: a call goes
    to the compiled code directly when it can, else to ``compiled`` (torch's wrapper)."""
    dispatch = stats_.dispatch
    call = dispatch.call_function

    @functools.wraps(fn)
    def direct_dispatch(*args: Any, **kwargs: Any) -> Any:
        return call(compiled, args, kwargs)

    # what Dynamo reads to inline a compiled function called from another compiled one
    direct_dispatch._torchdynamo_inline = getattr(compiled, "_torchdynamo_inline", fn)
    direct_dispatch._torchdynamo_orig_callable = getattr(compiled, "_torchdynamo_orig_callable", fn)
    return direct_dispatch


def stats(compiled: Any) -> CompileStats:
    """guardpolicy's state of what ``guardpolicy.compile`` returned (calls, compiles,
    stance, explanations). Raises TypeError for anything else."""
    found = getattr(compiled, "__dict__", {}).get(_ATTR)
    if not isinstance(found, CompileStats):
        raise TypeError(f"guardpolicy.stats() takes what guardpolicy.compile returned, "
                        f"not {type(compiled).__name__}")
    return found


def explain(compiled: Any) -> list[FrameExplanations]:
    """Per frame ``compiled`` has compiled so far, a ``FrameExplanations``: per guard an
    ``Explanation`` (keep or drop, the deciding rule with its file:line or None for the
    default, the guard's name and guard_type), and ``frame``, the ``CompiledFrame``
    (function, file:line, compile id). Raises TypeError for anything ``guardpolicy.compile``
    did not return."""
    return [FrameExplanations(frame, frame.frame) for frame in stats(compiled).explanations]


def _options_with_filter(options: dict | None, mode: str | None, backend: Any, guard_filter_fn) -> dict:
    """A new options dict holding ``guard_filter_fn``; ``mode`` (an Inductor setting that
    torch refuses beside ``options``) is spelled out as the Inductor options it stands for."""
    if mode is not None and options:
        raise ValueError("Either mode or options can be specified, but both can't be specified at the same time.")
    if options and "guard_filter_fn" in options:
        raise ValueError(
            "guardpolicy.compile: options already hold a guard_filter_fn; the policy is the "
            "guard filter (to combine filters, `use` them in the policy, e.g. `use builtin.NAME`)")
    opts = dict(options or {})
    if mode is not None:
        if backend != _INDUCTOR:
            raise ValueError(f"mode={mode!r} only applies to the inductor backend, not {backend!r}")
        from torch._inductor import list_mode_options

        opts.update(list_mode_options(mode))
    opts["guard_filter_fn"] = guard_filter_fn
    return opts


def _require_torch() -> None:
    import torch

    if not hasattr(torch.compiler, "skip_guard_on_globals_unsafe"):
        raise RuntimeError(
            f"guardpolicy needs torch.compile's guard_filter_fn (torch 2.8 or newer); "
            f"this is torch {torch.__version__}")
    global _tp
    from . import _torch_private as _tp

    if absent := _tp.missing():
        raise RuntimeError(f"guardpolicy.compile needs {', '.join(absent)}, which torch "
                           f"{torch.__version__} lacks")


_tp: Any = None  # guardpolicy._torch_private, imported with torch


def _verify_settings(policy: Policy, verify: int | None, on_violation: str | None) -> tuple[int, str]:
    """``(every, on_violation)``: the keywords, else the policy's ``verify`` line (read with
    ``getattr``: a policy without the attribute has none), else off and ``recompile``."""
    line = getattr(policy, "verify", None)
    every = verify if verify is not None else (line[0] if line else 0)
    action = on_violation if on_violation is not None else (line[1] if line and line[1] else "recompile")
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(f"verify must be a number of calls (an int >= 1; 0 or None: off), not {every!r}")
    if action not in ACTIONS:
        raise ValueError(f"on_violation must be one of {', '.join(ACTIONS)}, not {action!r}")
    return every, action


def _require_verify(model_or_fn: Any) -> None:
    """RuntimeError on a torch where the full guard set cannot be kept; ValueError for a
    callable whose top-level frame has no Python code to verify."""
    import torch

    if absent := _tp.missing_for_verify():
        raise RuntimeError(f"guardpolicy.compile(verify=...) needs {', '.join(absent)}, which torch "
                           f"{torch.__version__} lacks: the guards a policy drops cannot be kept")
    fn = model_or_fn.forward if isinstance(model_or_fn, torch.nn.Module) else model_or_fn
    if getattr(getattr(fn, "__func__", fn), "__code__", None) is None:
        raise ValueError(f"guardpolicy.compile(verify=...): {type(model_or_fn).__name__} has no Python "
                         "code to verify (a module's forward or a Python function is needed)")


def _rank_agreement(process_group: Any, check_ranks: Any, rank_timeout: Any,
                    settings: dict[str, Any]) -> RankAgreement:
    """The object's ``RankAgreement``; ``settings``: the other keywords the ranks must share."""
    if type(check_ranks) is not bool:
        raise TypeError(f"check_ranks must be a bool, not {type(check_ranks).__name__}")
    if isinstance(rank_timeout, bool) or not isinstance(rank_timeout, (int, float)) or not rank_timeout > 0:
        raise TypeError(f"rank_timeout must be a positive number of seconds, not {rank_timeout!r}")
    check_group(process_group)
    return RankAgreement(process_group, check_ranks, float(rank_timeout), {"check_ranks": check_ranks, **settings})


def compile(model_or_fn: Callable, policy: Policy | str | os.PathLike, *, mode: str | None = None,  # noqa: A001
            options: dict | None = None, backend: Any = _INDUCTOR, dispatch: str | None = None,
            verify: int | None = None, on_violation: str | None = None,
            dry_run: bool | str | os.PathLike = False,
            process_group: Any = None, check_ranks: bool = False, rank_timeout: float = DEFAULT_TIMEOUT_S,
            **torch_compile_kwargs: Any) -> Any:
    """``torch.compile(model_or_fn, ...)`` with ``policy`` as its ``guard_filter_fn`` and the
    policy's ``config`` and ``stance`` lines applied (see the module docstring).

    ``policy``: a ``Policy`` or anything ``guardpolicy.load`` accepts. ``options`` is copied,
    never changed. ``mode`` becomes the Inductor options it stands for (torch refuses both).
    ``dispatch="direct"`` (or the policy's ``dispatch direct`` line): after warm-up, calls
    check the kept guards and run the compiled code directly (``guardpolicy.dispatch``).
    Returns a ``GuardPolicyModule`` (an ``OptimizedModule``) for an ``nn.Module``, else
    ``torch.compile``'s function (with direct dispatch or verify, a function of guardpolicy's
    that calls it); ``guardpolicy.stats(result)`` holds the counts.
    ``verify=N``: every N-th call is checked, before it runs, against every guard the
    policy dropped (torch's guard manager of the cache entry torch would serve); a failure
    is handled per ``on_violation``: ``recompile`` (default), ``raise``
    (``StaleGuardError``) or ``warn`` (``StaleGuardWarning``). Both default to the policy's
    ``verify`` line. ``dry_run=True``: every guard is kept, what the policy would drop is
    recorded, and each recompile the policy would have turned into a stale result is
    attributed to the rule that would have dropped the failing guard
    (``guardpolicy.dry_run_report(result)``); a path instead of True also writes the
    report's JSON there at exit. See docs/verify.md.

    Many ranks (docs/distributed.md): when ``torch.distributed`` is initialised at the first
    compile, or ``process_group`` is given, the ranks of the group (the default one, or
    ``process_group``) agree on the policy at the first compile; ``check_ranks=True`` also
    compares each compiled frame's decisions. A rank waits at most ``rank_timeout`` seconds
    for the others (gloo). A disagreement raises ``RankMismatchError`` on every rank.

    Raises ``PolicyError`` for a bad policy, ``ValueError`` for ``mode`` with ``options``, with
    a non-inductor backend, for ``options`` that already hold a ``guard_filter_fn``, for an
    unknown ``dispatch`` or a bad ``verify``/``on_violation``/``dry_run``, or for a
    ``process_group`` without ``torch.distributed`` initialised or without this rank;
    ``TypeError`` for a ``check_ranks`` that is not a bool or a ``rank_timeout`` that is not a
    positive number; ``RuntimeError`` on a torch without what this needs.
    """
    _require_torch()
    import torch

    if not isinstance(policy, Policy):
        policy = load(policy)
    dispatch_mode = _dispatch_mode(policy, dispatch)
    every, action = _verify_settings(policy, verify, on_violation)
    if every and dry_run is not False:
        raise ValueError("guardpolicy.compile: dry_run keeps every guard, so verify has nothing to check; "
                         "use one or the other")
    if dry_run is not False and not (dry_run is True or isinstance(dry_run, (str, os.PathLike))):
        raise ValueError(f"dry_run must be True, False or a report path, not {dry_run!r}")
    if every:
        _require_verify(model_or_fn)
    elif dry_run is not False and (absent := _tp.missing_for_verify()):
        raise RuntimeError(f"guardpolicy.compile(dry_run=...) needs {', '.join(absent)}, which torch "
                           f"{torch.__version__} lacks")
    stats_ = CompileStats(policy, every, action, dry_run is not False,
                          _rank_agreement(process_group, check_ranks, rank_timeout,
                                          {"verify": every, "on_violation": action if every else None,
                                           "dry_run": dry_run is not False}))
    if dispatch_mode == "direct":
        direct = _dispatch()
        direct.require()
        warmup = stats_._warmup if stats_._warmup is not None else direct.DEFAULT_WARMUP
        fn = None if isinstance(model_or_fn, torch.nn.Module) else model_or_fn
        stats_.dispatch = direct.DirectDispatch(stats_, warmup, fn)
    if dry_run is not False and dry_run is not True:
        report_at_exit(stats_, dry_run)
    opts = _options_with_filter(options, mode, backend, GuardFilter(stats_))
    compiled = torch.compile(model_or_fn, backend=backend, options=opts, **torch_compile_kwargs)
    ctx = _tp.dynamo_context(compiled)
    _install(ctx, stats_)
    if isinstance(compiled, _tp.OptimizedModule):
        module = _module_class(direct=stats_.dispatch is not None)(compiled._orig_mod, ctx, stats_)
        # What torch's OptimizeContext.__call__ sets on the module it returns.
        module._torchdynamo_orig_callable = compiled._torchdynamo_orig_callable
        module._torchdynamo_wrapper_id = id(module)
        module.get_compiler_config = compiled.get_compiler_config
        return module
    wrapped = ctx(model_or_fn)  # a new compile_wrapper: it captures the scoped callback
    if stats_.needs_call_path:
        wrapped = _through_path(wrapped, _call_path(wrapped, stats_, function=model_or_fn))
    if stats_.dispatch is not None:
        wrapped = _function_with_dispatch(wrapped, model_or_fn, stats_)
    setattr(wrapped, _ATTR, stats_)
    return wrapped


def _call_path(inner: Callable, stats_: CompileStats, **frame: Any) -> CallPath:
    """The per-call path of a compiled object, whose verdicts the ranks agree on
    (``rank_verdicts``; a no-op without a group)."""
    path = CallPath(inner, stats_, **frame)
    path.agree = VerdictAgreement(stats_)
    return path


def _through_path(wrapped: Callable, path: CallPath) -> Callable:
    """A function that calls ``path``, looking like ``wrapped`` (name, doc, ``__wrapped__``)."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        return path(*args, **kwargs)

    functools.update_wrapper(guarded, wrapped)
    guarded._guardpolicy_path = path  # type: ignore[attr-defined]
    return guarded
