"""Direct dispatch (``guardpolicy.compile(..., dispatch="direct")``): after warm-up, a call of
the compiled object checks the kept guards of its frame's cache entries with torch's own guard
manager and calls the chosen entry's compiled code itself, without Dynamo's per-call machinery
(``compile_wrapper``, the eval-frame callback, the cache lookup).

* **Capture** (``capture``). Once ``warmup`` consecutive calls compiled nothing, the next call that takes the
  normal path captures, per cache entry of the frame (torch's lookup order), its guard manager
  (``root.check(f_locals)`` is torch's evaluation of the kept guards) and a function built
  from its transformed code with the original function's globals, defaults and closure.
  What it cannot dispatch directly it refuses, with the reason recorded in ``refusals``.
* **Per call.** The frame locals are built as the frame would hold them (parameters with
  defaults, ``*args``/``**kwargs`` packed, free variables), by a function with the frame's own
  signature (so CPython binds the arguments); the first entry whose kept guards pass runs, and
  moves to the front, as in torch's lookup. When no entry passes, or anything the kept guards
  do not cover differs (see ``FALLBACK_REASONS``), the call takes the normal torch path, which
  recompiles as usual; each such call is counted by reason in ``fallbacks``.
* **Lifetimes.** Nothing of a call is kept (the locals dict is dropped before the compiled
  code runs). A captured entry is checked alive on every call (torch sets
  ``guard_manager.cache_entry`` to None when it frees or invalidates the entry, e.g. on
  ``torch.compiler.reset()`` or when an ID_MATCH'd object dies), and every Dynamo compile in
  the process makes the capture stale: the next quiet call captures again. So does a new
  ``forward`` of the original module (``m.forward = ...``, ``m.__class__ = Sub``).
"""

from __future__ import annotations

import types
from collections import Counter
from typing import Any, Callable

import torch

from .. import torch_internals as _tp
from .capture import GENERATION, Refusal, Refused, Target, build, bump, where
from .compared import RERUN

#: Quiet calls before the first capture, for a policy without a ``stance ... after N calls`` line.
DEFAULT_WARMUP = 8

# Why a call took the normal path (the keys of ``DirectDispatch.fallbacks``).
KEPT_GUARD_FAILED = "a kept guard failed"
ENTRY_GONE = "the captured cache entry was freed or invalidated"
NEW_COMPILE = "a Dynamo compile ran since the capture"
DYNAMO_ACTIVE = "called inside a Dynamo context (an eval-frame callback is set)"
STANCE = "torch's stance is not `default`"
TRACING = "tracing (jit, fx, export, a functorch transform or Dynamo)"
MODULE_HOOKS = "module hooks (on the compiled module, its original module, or global)"
FORWARD_CHANGED = "the original module's forward or class changed since the capture"
FUNCTION_CHANGED = "the compiled function's __code__, __defaults__ or __kwdefaults__ changed since the capture"
GLOBAL_STATE = "global state (grad mode, autocast, ...) differs and a kept guard set lacks GLOBAL_STATE"
TORCH_FUNCTION = "a torch function mode is active and a kept guard set lacks TORCH_FUNCTION_STATE"
SAVED_TENSORS_HOOKS = "saved-tensors hooks are active and a kept guard set lacks AUTOGRAD_SAVED_TENSORS_HOOKS"
VERIFY_CAUGHT = "verify found a dropped guard failing (on_violation recompile)"
FALLBACK_REASONS = (KEPT_GUARD_FAILED, ENTRY_GONE, NEW_COMPILE, DYNAMO_ACTIVE, STANCE, TRACING,
                    MODULE_HOOKS, FORWARD_CHANGED, FUNCTION_CHANGED, GLOBAL_STATE, TORCH_FUNCTION, SAVED_TENSORS_HOOKS, VERIFY_CAUGHT)

#: torch stances under which a cache hit runs the compiled code, as direct dispatch does.
_HIT_STANCES = frozenset({"default", "fail_on_recompile", "eager_on_recompile"})
_MISS = object()

def require() -> None:
    """Raises RuntimeError naming what this torch lacks for direct dispatch."""
    if absent := _tp.dispatch_missing():
        raise RuntimeError(f"guardpolicy.compile(dispatch='direct') needs {', '.join(absent)}, "
                           f"which torch {torch.__version__} lacks{_tp.DOCTOR_HINT}")


class DirectDispatch:
    """Direct dispatch of one compiled object: ``guardpolicy.stats(compiled).dispatch``.

    ``mode`` (``"direct"``); ``warmup``, the quiet calls before a capture; ``state``:
    ``"warm-up"`` (nothing captured yet, or since the last compile), ``"direct"`` or
    ``"refused"``; ``direct_calls``, calls that ran the compiled code directly; ``fallbacks``,
    per reason (``FALLBACK_REASONS``) the calls that took the normal path while a capture was
    held; ``refusals``, each ``Refusal`` (reason and frame) recorded, once per reason;
    ``captures``, how many captures succeeded. Counts are plain ints, as in ``CompileStats``.
    """

    def __init__(self, stats: Any, warmup: int, fn: Any = None):
        self.mode = "direct"
        self.warmup = warmup
        self.direct_calls = 0
        self.captures = 0
        self.fallbacks: Counter[str] = Counter()
        self.refusals: list[Refusal] = []
        self._stats = stats
        self._fn = fn  # the compiled function (None for a module: it comes with each call)
        self._normal: Any = None  # what a function's calls go to when not direct
        self._ctx: Any = None
        self._target: Target | None = None
        self._tried = -1  # the compile generation of the last capture attempt

    @property
    def state(self) -> str:
        if self._target is not None and self._target.generation == GENERATION[0]:
            return "direct"  # (a capture older than the last compile is dropped at the next call)
        return "refused" if self._tried == GENERATION[0] and self.refusals else "warm-up"

    def bind_context(self, ctx: Any) -> None:
        """The ``OptimizeContext`` whose frames this dispatches."""
        self._ctx = ctx

    def reset(self) -> None:
        """Drops the capture: calls take the normal path until the next warm-up ends."""
        self._target = None
        self._tried = -1

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_target=None, _tried=-1, _ctx=None, _normal=None)
        return state

    def __repr__(self) -> str:
        return (f"<guardpolicy.DirectDispatch {self.state}: {self.direct_calls} direct calls, "
                f"{sum(self.fallbacks.values())} fallbacks, {len(self.refusals)} refusals>")

    # -- per call ---------------------------------------------------------------------------

    def call_function(self, normal: Callable, args: tuple, kwargs: dict) -> Any:
        """A call of a compiled function: direct when it can be, else ``normal``."""
        target = self._target
        if target is not None:
            out = self._direct(target, args, kwargs)
            if out is not _MISS:
                return out
        out = normal(*args, **kwargs)
        self._normal = normal
        self._maybe_capture(None)
        return out

    def call_module(self, wrapper: Any, normal: Callable, args: tuple, kwargs: dict) -> Any:
        """A call of a compiled module (``wrapper``, the ``GuardPolicyModule``): direct when
        neither it nor its original module nor the process has module hooks and the rest
        allows, else ``normal(wrapper, ...)`` (``OptimizedModule.__call__``)."""
        target = self._target
        if target is not None:
            out = self._direct(target, args, kwargs, wrapper.__dict__)
            if out is not _MISS:
                return out
        out = normal(wrapper, *args, **kwargs)
        self._maybe_capture(wrapper)
        return out

    def _direct(self, target: Target, args: tuple, kwargs: dict, wrapper_dict: Any = None) -> Any:
        """The call made directly, or ``_MISS`` (the reason counted in ``fallbacks``).
        ``wrapper_dict``: the ``__dict__`` of a compiled module (whose hooks, and its original
        module's, send the call to the normal path)."""
        why = None
        if wrapper_dict is not None and (target.module_dict.get("forward", type(target.module))
                                         is not target.forward_owner):
            self.reset()  # the normal path runs the new forward; a quiet call captures it
            why = FORWARD_CHANGED
        elif (target.fn.__code__ is not target.code or target.fn.__defaults__ is not target.defaults
              or target.fn.__kwdefaults__ is not target.kwdefaults):
            self.reset()  # the entries run the captured code and defaults: the normal path runs the new
            why = FUNCTION_CHANGED
        elif wrapper_dict is not None and (_hooked(wrapper_dict) or _hooked(target.module_dict)
                                         or _tp.has_global_module_hooks()):
            why = MODULE_HOOKS
        elif target.generation != GENERATION[0]:
            self._target = None  # the next quiet call captures again
            why = NEW_COMPILE
        elif _tp.get_eval_frame_callback() is not None:
            why = DYNAMO_ACTIVE
        elif _tp.eval_frame._stance.stance not in _HIT_STANCES:
            why = STANCE
        elif (_tp.is_jit_tracing() or _tp.functorch_depth() or _tp.fx_tracing()
              or torch.compiler.is_exporting() or _tp.tracing_context_set()):
            why = TRACING
        elif target.global_state is not None and not target.global_state.check():
            why = GLOBAL_STATE
        elif target.check_function_modes and _tp.len_torch_function_stack():
            why = TORCH_FUNCTION
        elif target.check_saved_hooks and _tp.saved_tensors_hooks_active():
            why = SAVED_TENSORS_HOOKS
        if why is not None:
            self.fallbacks[why] += 1
            return _MISS
        lead = target.lead
        f_locals = target.bind(*args, **kwargs) if lead is None else target.bind(lead, *args, **kwargs)
        entries = target.entries
        for entry in entries:
            if entry.root.check(f_locals):
                break
        else:
            self.fallbacks[KEPT_GUARD_FAILED] += 1
            if self._stats.policy.stance_warmup is not None:  # a stance line: it would skip the guards that
                self._stats.reset_stance()       # just failed; back to warm-up, so this recompiles
            return _MISS
        cache_entry = entry.manager.cache_entry
        if cache_entry is None:  # torch.compiler.reset(), or torch invalidated it
            self.reset()
            self.fallbacks[ENTRY_GONE] += 1
            return _MISS
        if entry is not entries[0]:  # a new list, bound at once: safe against a concurrent call
            target.entries = [entry, *(e for e in entries if e is not entry)]
        stance = target.stance
        call = stance.call_count = stance.call_count + 1
        every = target.verify_every
        if every and call % every == 0 and (caught := self._verify_caught(target, call, args, kwargs,
                                                                          (cache_entry, f_locals))):
            if caught is True:
                return _MISS
            del f_locals, cache_entry
            return self._compared(target, caught, call, entry, lead, args, kwargs)  # run against eager
        del f_locals, cache_entry  # no reference to the call's inputs while it runs
        self.direct_calls += 1
        try:
            return entry.fn(*args, **kwargs) if lead is None else entry.fn(lead, *args, **kwargs)
        except BaseException:
            if _tp.functorch_depth():  # what compile_wrapper undoes when a graph raises
                _tp.functorch_pop_to(0)
            raise

    def _compared(self, target: Target, comparison: Any, call: int, entry: Any, lead: Any, args: tuple,
                  kwargs: dict) -> Any:
        """Direct call ``call`` settled by ``comparison`` (``compared.Comparison``): its result,
        or ``_MISS`` when it must run again on a new compile (verify recompiles: the normal
        path runs it, as ``_verify_caught`` sends it)."""
        out = comparison.run(lambda: _run(entry, lead, args, kwargs))
        if out is not RERUN:
            self.direct_calls += 1
            return out
        target.stance.call_count = call - 1
        self._stats.counts.verified_calls -= 1  # one call, verified once: the normal path counts it
        self.reset()
        self.fallbacks[VERIFY_CAUGHT] += 1
        return _MISS

    def _verify_caught(self, target: Target, call: int, args: tuple, kwargs: dict, served: tuple) -> Any:
        """verify's sampled check of a direct call, before it runs (issue 14's path: it
        records, logs and acts), on ``served``: the cache entry whose kept guards just passed
        and the frame locals they passed on. True when the call must take the normal path
        instead: under ``on_violation recompile`` the stale entry is invalidated and the normal
        path, which counts and verifies the call again, compiles anew. ``raise`` raises;
        ``warn`` lets the call go on (False). Where only dropped value guards failed, the
        ``compared.Comparison`` that settles the call when it runs."""
        verdict = target.path.verify(call, args, kwargs, served)
        if verdict.comparable:
            return target.path.comparison(verdict, served, args, kwargs)
        if verdict.stale and self._stats.on_violation == "recompile":
            target.stance.call_count = call - 1
            self._stats.counts.verified_calls -= 1  # one call, verified once: the normal path counts it
            self.reset()
            self.fallbacks[VERIFY_CAUGHT] += 1
            return True
        return False

    # -- capture ----------------------------------------------------------------------------

    def _maybe_capture(self, wrapper: Any) -> None:
        if (self._target is None and self._tried != GENERATION[0]
                and self._stats.stance.quiet_calls >= self.warmup):
            self._capture(wrapper)

    def _capture(self, wrapper: Any) -> None:
        _tp.on_every_compile(bump)  # again: torch.compiler.reset() unregisters it
        self._tried = GENERATION[0]
        fn, lead = self._frame_function(wrapper)
        try:
            target = build(fn, lead, None if wrapper is None else wrapper._orig_mod, self._ctx, self._stats.stance,
                           self._stats.registries.explanations)
            target.stance = self._stats.stance
            target.path = self._verify_path(wrapper)
            target.verify_every = getattr(self._stats, "verify_every", 0) if target.path is not None else 0
            self._target = target
            self.captures += 1
        except Refused as refused:
            self._refuse(str(refused), where(fn))

    def _refuse(self, reason: str, frame: str) -> None:
        refusal = Refusal(reason, frame)
        if refusal not in self.refusals:
            self.refusals.append(refusal)

    def _verify_path(self, wrapper: Any) -> Any:
        """verify's per-call path of this object (a ``call_path.CallPath``: a module's ``forward``,
        or the function's ``_guardpolicy_path``), or None without verify."""
        if not getattr(self._stats, "verify_every", 0):
            return None
        path = wrapper.forward if wrapper is not None else getattr(self._normal, "_guardpolicy_path", None)
        return path if callable(getattr(path, "verify", None)) else None

    def _frame_function(self, wrapper: Any) -> tuple[Any, Any]:
        """The function whose frame Dynamo compiled, and the argument it takes first."""
        if wrapper is None:
            fn = self._fn
            if isinstance(fn, types.MethodType):
                return fn.__func__, fn.__self__
            return fn, None
        mod = wrapper._orig_mod
        forward = wrapper.forward  # torch's compile_wrapper, or verify's path around it
        inner = getattr(getattr(forward, "inner", forward), "__wrapped__", None)
        if isinstance(inner, types.FunctionType):  # a torch module: Dynamo compiles the frame
            return inner, None                     # of external_utils.wrap_inline's function
        forward = mod.forward
        if isinstance(forward, types.MethodType) and forward.__self__ is mod:
            return forward.__func__, mod
        return forward, None

def _run(entry: Any, lead: Any, args: tuple, kwargs: dict) -> Any:
    """The captured entry's compiled code on the call's arguments."""
    try:
        return entry.fn(*args, **kwargs) if lead is None else entry.fn(lead, *args, **kwargs)
    except BaseException:
        if _tp.functorch_depth():  # what compile_wrapper undoes when a graph raises
            _tp.functorch_pop_to(0)
        raise


def _hooked(module_dict: dict) -> bool:
    """Whether the module whose ``__dict__`` this is has forward or backward hooks (read
    from the instance dict: an ``nn.Module``'s ``__getattr__`` makes each attribute read
    slower than a dict lookup, per call)."""
    return bool(module_dict["_forward_hooks"] or module_dict["_forward_pre_hooks"]
                or module_dict["_backward_hooks"] or module_dict["_backward_pre_hooks"])

