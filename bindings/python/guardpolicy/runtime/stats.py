"""``CompileStats``: guardpolicy's state of one compiled object (``guardpolicy.stats(compiled)``,
``stats``): what it was compiled with, and its parts: the stance machine and the call count
(``call.stance.Stance``), the counters (``records.Counts``) and the registries
(``records.Registries``), whose fields it shows under their own names."""

from __future__ import annotations

from typing import Any, Callable

from ..api.policy import Policy
from ..distributed.agreement import RankAgreement
from .call.stance import Stance
from .frames import EagerFallback, FrameExplanations
from .logs import log as _log, making_tool_objects
from .records import Counts, Registries
from .watch import free_tensors


class _Shown:
    """A field of one of ``CompileStats``' parts, read and written under its own name on
    ``CompileStats`` (``gp.stats(c).compiles`` is ``gp.stats(c).counts.compiles``)."""

    def __init__(self, part: str, doc: str = ""):
        self.part = part
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.part), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(getattr(obj, self.part), self.name, value)


class CompileStats:
    """guardpolicy's state of one compiled object: ``guardpolicy.stats(compiled)``.

    What it was compiled with: ``policy``; ``verify_every``, ``on_violation`` and
    ``dry_run``; ``ranks``, the agreement across ``torch.distributed`` ranks (a
    ``RankAgreement``, see guardpolicy.distributed.agreement); ``tool_object``: made by one of
    guardpolicy's tools for itself (inside ``logs.tool_objects()``): its stance recoveries are
    neither logged nor warned about; ``config_overrides``: config knobs in force over the
    policy's own lines (a module compiled in place: no free tensors).

    Its parts, each field also shown here under its own name: ``stance`` (a ``Stance``:
    ``call_count``, ``warmup``, ``on_recompile``, ``stance_active``), ``counts`` (a ``Counts``:
    ``compiles``, ``verified_calls``, ``unverified_calls``, ``recoveries``) and ``registries``
    (a ``Registries``: ``explanations``, per compiled frame the decision and deciding rule of
    every guard, and ``frame``, which frame; ``violations``; ``dry_run_events``; ``watches``;
    ``eager_fallbacks``, each frame torch stopped compiling at a recompile limit, logged at
    WARNING when it happens: a call that none of that frame's cache entries accepts runs it
    eagerly from then on; ``dispatch``; ``guards``).

    With a ``stance`` line: ``calls``, the calls of the compiled object (counted by the
    per-call hook that sets the stance); ``quiet_calls``, calls since the last one that
    compiled; ``stance_active``, calls now run with ``skip_guard_eval_unsafe``;
    ``on_recompile``, the policy's action for a call after warm-up that no cache entry
    accepts, and ``recoveries``, such calls that compiled with every guard
    (``guardpolicy.runtime.call.recovery``). Without one, guardpolicy adds nothing to a call
    and ``calls`` and ``quiet_calls`` are None. Picklable; copied with the compiled object.
    """

    __slots__ = ("policy", "ranks", "on_violation", "dry_run", "tool_object", "config_overrides",
                 "stance", "counts", "registries")

    call_count = _Shown("stance")
    verify_every = _Shown("stance")
    on_recompile = _Shown("stance")
    warmup = _Shown("stance", "The quiet calls before the stance (the ``stance`` line's N), or None.")
    compiles = _Shown("counts")
    verified_calls = _Shown("counts")
    unverified_calls = _Shown("counts")
    checked_by_eager = _Shown("counts", "Verified calls where only dropped value guards failed and the cached code's "
                              "outputs and writes equalled eager's: no violation (docs/verify.md).")
    recoveries = _Shown("counts")
    serve_time_compiles = _Shown("counts", "Calls inside ``guardpolicy.serving(...)`` that would compile.")
    explanations = _Shown("registries")
    violations = _Shown("registries")
    dry_run_events = _Shown("registries")
    eager_fallbacks = _Shown("registries")
    recompiles = _Shown("registries")
    dispatch = _Shown("registries")
    guards = _Shown("registries")
    watches = _Shown("registries")

    def __init__(self, policy: Policy, verify_every: int = 0, on_violation: str = "recompile",
                 dry_run: bool = False, ranks: RankAgreement | None = None):
        self.policy = policy
        self.ranks = ranks if ranks is not None else RankAgreement()
        self.on_violation = on_violation
        self.dry_run = dry_run
        self.tool_object = making_tool_objects()
        self.config_overrides: dict[str, Any] = {}
        warmup = policy.stance_warmup
        on_recompile = (getattr(policy, "on_recompile", None) or "recompile") if warmup is not None else None
        self.stance = Stance(warmup, on_recompile, verify_every)
        self.counts = Counts()
        self.registries = Registries()
        self.stance.path_counts = self.needs_call_path

    def set_dispatch(self, dispatch: Any) -> None:
        """Direct dispatch (a ``dispatch.DirectDispatch``) for this object's calls; then no
        call goes through the per-call path that recovers."""
        self.registries.dispatch = dispatch
        self.stance.path_counts = self.needs_call_path

    @property
    def needs_call_hook(self) -> bool:
        """Whether calls need guardpolicy's per-call hook (a stance line, or direct dispatch,
        which counts quiet calls)."""
        return self.stance.warmup is not None or self.registries.dispatch is not None

    @property
    def needs_call_path(self) -> bool:
        """Whether calls go through guardpolicy's per-call path (``call_path.CallPath``): verify, or
        a stance that recovers (``on_recompile`` recompile or warn; not with direct dispatch)."""
        return bool(self.stance.verify_every) or self.recovers

    @property
    def recovers(self) -> bool:
        """Whether a call after warm-up that no cache entry accepts compiles (``recovery``)."""
        return self.stance.on_recompile in ("recompile", "warn") and self.registries.dispatch is None

    @property
    def calls(self) -> int | None:
        return self.stance.call_count if self.needs_call_hook or self.needs_call_path else None

    @property
    def quiet_calls(self) -> int | None:
        return self.stance.quiet_calls if self.needs_call_hook or self.needs_call_path else None

    @property
    def stance_active(self) -> bool:
        """Whether the next call runs with ``skip_guard_eval_unsafe``."""
        return self.stance.stance_active

    @property
    def config(self) -> dict[str, Any]:
        """The Dynamo config knobs (``torch_internals.config_patch``) in force while this object's frames compile."""
        return self.policy.config

    def config_for(self, frame: Any) -> dict[str, Any]:
        """``config`` for a compile of ``frame`` (the frame Dynamo's callback got, or None):
        ``install_free_tensors`` off where its tensors are passed as graph inputs instead
        (``watch.free_tensors.as_inputs``: moved, while Dynamo holds cache entries of the
        code, or one of many instances in the compiled model)."""
        from . import torch_internals

        config = {**self.policy.config, **self.config_overrides} if self.config_overrides else self.policy.config
        code = getattr(frame, "f_code", None)
        if not config.get("install_free_tensors") or code is None:
            return config
        if not torch_internals.cache_entries_of(code):
            free_tensors.forget(code)
        if free_tensors.as_inputs(code, getattr(frame, "f_locals", None), self.registries.watches.model):
            return {**config, "install_free_tensors": False}
        return config

    def reset_stance(self) -> None:
        """Back to full guard evaluation; the warm-up count starts again (and direct dispatch
        drops its capture until the warm-up ends)."""
        self.stance.reset()
        if self.registries.dispatch is not None:
            self.registries.dispatch.reset()

    def enter(self) -> Callable[[], None]:
        """The per-call hook of an object pickled before the stance was a part of its own
        (its context holds this bound method; ``compiled._install`` binds it to ``stance``)."""
        return self.stance.enter()

    def begin_recovery(self) -> None:
        """A call after warm-up matched no cache entry (``guardpolicy.runtime.call.recovery``):
        full guard evaluation from this call on, and the warm-up count starts again."""
        self.counts.recoveries += 1
        self.stance.begin_recovery()

    def end_recovery(self) -> None:
        self.stance.end_recovery()

    def record_compile(self, explanations: FrameExplanations) -> None:
        stance = self.stance
        if stance.recovering and not self.tool_object:  # once per new cache entry
            _log.warning("guardpolicy: call %d of %r after warm-up matched no cache entry of %s; compiled a new "
                         "one with every guard evaluated (recovery %d); the stance returns after %d quiet calls",
                         stance.call_count, self.policy.name, explanations.frame, self.counts.recoveries,
                         stance.warmup)
        self.counts.compiles += 1
        stance.compiled()
        self.registries.explanations.append(explanations)

    def record_eager_fallback(self, fallback: EagerFallback) -> None:
        """torch stopped compiling a frame of this object at a recompile limit (seen by the
        scoped callback, once per frame, at compile time): recorded and logged."""
        self.registries.eager_fallbacks.append(fallback)
        _log.warning("guardpolicy: %s of policy %r falls back to eager: %s; %s"
                     "last reason: %s; from now on a call that none of its cache entries accepts runs it uncompiled "
                     "(gp.stats(compiled).eager_fallbacks; `python -m guardpolicy recompiles` says which guard "
                     "storms and proves a fix)",
                     fallback.frame, self.policy.name, fallback.hit,
                     f"most often: {fallback.most_failed}; " if fallback.most_failed else "",
                     fallback.last_reason or "not recorded")

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.tool_object = False  # pickled before the flag existed
        self.config_overrides = {}  # pickled before overrides existed
        if "stance" not in state:  # pickled before the stance, counts and registries were parts
            state = _parts_of(state)
        for name, value in state.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        calls = f"{self.stance.call_count} calls, " if self.needs_call_hook else ""
        return (f"<guardpolicy.CompileStats {self.policy.name!r}: {calls}{self.counts.compiles} compiles, "
                f"stance {'on' if self.stance_active else 'off'}>")


def _parts_of(flat: dict[str, Any]) -> dict[str, Any]:
    """The state of a ``CompileStats`` pickled with every field its own (before its parts):
    the same state, its fields moved to ``stance``, ``counts`` and ``registries``."""
    stance = Stance.__new__(Stance)
    stance.__setstate__({"call_count": flat.pop("call_count", flat.pop("_calls", 0)),
                         "verify_every": flat.pop("verify_every", 0), "warmup": flat.pop("_warmup", None),
                         "on_recompile": flat.pop("on_recompile", None), "active": flat.pop("_active", False),
                         "last_compile_call": flat.pop("_last_compile_call", 0), "recovering": False,
                         "path_counts": flat.pop("_path_counts", False)})
    counts = Counts(*(flat.pop(name, 0) for name in ("compiles", "verified_calls", "unverified_calls", "recoveries")))
    registries = Registries()
    for name in ("explanations", "violations", "dry_run_events", "eager_fallbacks", "dispatch"):
        if name in flat:
            setattr(registries, name, flat.pop(name))
    known = set(CompileStats.__slots__)
    return {**{k: v for k, v in flat.items() if k in known}, "stance": stance, "counts": counts,
            "registries": registries}


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
