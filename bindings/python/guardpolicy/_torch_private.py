"""The private torch APIs that ``guardpolicy.compile`` needs, feature-detected, in one place.

torch has no public way to run code only when *one* compiled object compiles, or to give one
compiled object the ``skip_guard_eval_unsafe`` stance while others keep full guard
evaluation. Dynamo's own machinery offers both, privately:

* ``OptimizeContext.callback`` (``torch/_dynamo/eval_frame.py``): what the eval-frame hook
  calls on a cache miss of a frame run under this context, i.e. only when a frame compiles
  (or is first seen). Wrapping it scopes config knobs to this object's compiles.
* ``OptimizeContext.enter_exit_hooks``: called by ``compile_wrapper`` on every call of this
  context's compiled object, just before it reads ``eval_frame._stance`` to set the C flag
  ``skip_guard_eval_unsafe``; the hook's return value is called when the call ends.
* ``convert_frame.compile_lock``: the lock every Dynamo compile holds.

Every name is looked up once, here; ``missing()`` says what this torch lacks, so
``guardpolicy.compile`` fails with a clear error instead of misbehaving.
"""

from __future__ import annotations

import dis as _dis
import sys
from typing import Any

import torch
import torch._C._dynamo.eval_frame as _c_eval_frame
import torch._dynamo.convert_frame as _convert_frame
import torch._dynamo.eval_frame as _eval_frame
import torch._dynamo.guards as _guards

#: ``torch._dynamo.eval_frame``: its ``_stance`` is torch's current ``DynamoStance``
#: (``torch.compiler.set_stance`` replaces the object; read it on every use).
eval_frame = _eval_frame

#: ``torch.compile``'s result for an ``nn.Module``.
OptimizedModule = getattr(_eval_frame, "OptimizedModule", None)
_Context = getattr(_eval_frame, "_TorchDynamoContext", None)


def missing() -> list[str]:
    """The private torch names ``guardpolicy.compile`` needs and this torch lacks (empty on
    torch 2.13 and 2.14)."""
    wanted = {
        "torch._dynamo.eval_frame.OptimizedModule": OptimizedModule,
        "torch._dynamo.eval_frame._TorchDynamoContext": _Context,
        "torch._dynamo.eval_frame._stance": getattr(_eval_frame, "_stance", None),
        "torch._dynamo.convert_frame.compile_lock": getattr(_convert_frame, "compile_lock", None),
    }
    return [name for name, value in wanted.items() if value is None]


def dynamo_context(compiled: Any) -> Any:
    """The ``OptimizeContext`` behind a ``torch.compile`` result: ``OptimizedModule.dynamo_ctx``
    for a module, the ``self`` cell of ``compile_wrapper``'s closure for a function.
    Raises RuntimeError when there is none (a torch whose ``compile_wrapper`` changed)."""
    if OptimizedModule is not None and isinstance(compiled, OptimizedModule):
        return compiled.dynamo_ctx
    for cell in getattr(compiled, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, _Context):
            return value
    raise RuntimeError(
        f"guardpolicy.compile: cannot find the Dynamo context of {type(compiled).__name__} "
        f"(torch {torch.__version__} changed torch.compile's wrapper)")


def hooks_of(ctx: Any) -> list:
    """``ctx.enter_exit_hooks``. Raises RuntimeError on a torch without them."""
    hooks = getattr(ctx, "enter_exit_hooks", None)
    if not isinstance(hooks, list):
        raise RuntimeError(
            f"guardpolicy.compile: torch {torch.__version__} has no per-call enter/exit hooks "
            "on its Dynamo context (OptimizeContext.enter_exit_hooks)")
    return hooks


def compile_lock() -> Any:
    """The re-entrant lock held by every Dynamo compile."""
    return _convert_frame.compile_lock


def dynamo_config() -> Any:
    return torch._dynamo.config


# -- direct dispatch (guardpolicy.dispatch) ------------------------------------------------
#
# Dynamo keeps a frame's compiled products on its code object: per cache entry the
# transformed code (``.code``) and the guard manager of the kept guards (``.guard_manager``,
# whose ``root.check(f_locals)`` is torch's own evaluation). ``CacheEntry`` objects are
# borrowed C++ references: never kept; the guard manager and the code are Python objects.
# When torch frees or invalidates an entry it sets ``guard_manager.cache_entry`` to None
# (torch/csrc/dynamo/cache_entry.cpp), which is how a captured entry is known dead.

import torch._C._dynamo.eval_frame as _c_eval_frame  # noqa: E402

_region_entries = getattr(_c_eval_frame, "_get_cache_entries_for_region", None)
_all_entries = getattr(_c_eval_frame, "_debug_get_cache_entry_list", None)
#: the eval-frame callback of this thread (None outside any Dynamo context)
get_eval_frame_callback = getattr(_c_eval_frame, "get_eval_frame_callback", None)
#: torch's snapshot of grad mode, autocast, default dtype, ... (``.check()``: unchanged)
GlobalStateGuard = getattr(getattr(torch._C._dynamo, "guards", None), "GlobalStateGuard", None)
len_torch_function_stack = getattr(torch._C, "_len_torch_function_stack", None)
functorch_depth = getattr(getattr(torch._C, "_functorch", None), "get_dynamic_layer_stack_depth", None)
functorch_pop_to = getattr(getattr(torch._C, "_functorch", None),
                           "pop_dynamic_layer_stack_and_undo_to_depth", None)
is_jit_tracing = getattr(torch._C, "_is_tracing", None)
_saved_hooks = getattr(getattr(torch._C, "_autograd", None), "_top_saved_tensors_default_hooks", None)
#: whether a global module hook is registered (``register_module_forward_hook`` & co)
has_global_module_hooks = getattr(torch.nn.modules.module, "_has_any_global_hook", None)


def _callback_handler() -> Any:
    return getattr(torch._dynamo, "callback_handler", None)


def _fx_tracing_reader() -> Any:
    """A function saying whether ``torch.fx.symbolic_trace`` is tracing in this thread: torch
    2.13 keeps a module flag, 2.14 a thread-local one."""
    import torch.fx._symbolic_trace as fx_trace

    if hasattr(fx_trace, "_get_is_fx_tracing"):
        return fx_trace._get_is_fx_tracing
    if hasattr(fx_trace, "_is_fx_tracing_flag"):
        return lambda: fx_trace._is_fx_tracing_flag
    return None


#: ``fx_tracing()``: whether fx's symbolic tracer is tracing (None on a torch without either)
fx_tracing = _fx_tracing_reader()


def dispatch_missing() -> list[str]:
    """What ``dispatch="direct"`` needs beyond ``missing()`` and this torch lacks."""
    handler = _callback_handler()
    present = {
        "torch._C._dynamo.eval_frame._get_cache_entries_for_region": (_region_entries or _all_entries) is not None,
        "torch._C._dynamo.eval_frame.get_eval_frame_callback": get_eval_frame_callback is not None,
        "torch._C._dynamo.guards.GlobalStateGuard": GlobalStateGuard is not None,
        "torch._C._len_torch_function_stack": len_torch_function_stack is not None,
        "torch._C._functorch.get_dynamic_layer_stack_depth": functorch_depth is not None,
        "torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth": functorch_pop_to is not None,
        "torch._C._is_tracing": is_jit_tracing is not None,
        "torch._C._autograd._top_saved_tensors_default_hooks": _saved_hooks is not None,
        "torch._dynamo.callback_handler": hasattr(handler, "register_start_callback"),
        "torch._dynamo.eval_frame._stance.stance": hasattr(getattr(_eval_frame, "_stance", None), "stance"),
        "torch.fx._symbolic_trace._get_is_fx_tracing (2.14) or _is_fx_tracing_flag (2.13)": fx_tracing is not None,
        "torch.compiler._is_exporting_flag": hasattr(torch.compiler, "_is_exporting_flag"),
        "torch._guards._TLS": hasattr(torch._guards, "_TLS"),
        "torch.nn.modules.module._has_any_global_hook": has_global_module_hooks is not None,
    }
    return [name for name, ok in present.items() if not ok]


def cache_entries(code: Any, isolate_recompiles_id: int) -> list:
    """The cache entries of ``code`` in the region of a Dynamo context, in torch's lookup
    order (most recently used first). Borrowed references: read them at once."""
    if _region_entries is not None:
        return _region_entries(code, isolate_recompiles_id)
    return _all_entries(code)


def backend_of(callback: Any) -> Any:
    """The backend a cache entry records for a callback: the end of its
    ``_torchdynamo_orig_backend`` chain (torch/csrc/dynamo/cache_entry.cpp ``get_backend``)."""
    while hasattr(callback, "_torchdynamo_orig_backend"):
        callback = callback._torchdynamo_orig_backend
    return callback


def saved_tensors_hooks_active() -> bool:
    """Whether a ``torch.autograd.graph.saved_tensors_hooks`` context is active."""
    return _saved_hooks(True) is not None


def on_every_compile(fn: Any) -> None:
    """Calls ``fn(args)`` when any Dynamo compile starts and when it ends (torch's
    compilation callback handler). Idempotent; ``torch._dynamo.reset()`` clears the handler,
    so callers register again before they rely on it."""
    handler = _callback_handler()
    if fn not in handler.start_callbacks:
        handler.register_start_callback(fn)
    if fn not in handler.end_callbacks:
        handler.register_end_callback(fn)


#: the thread-local state whose ``tracing_context`` is set while Dynamo or AOT traces
guards_tls = getattr(torch._guards, "_TLS", None)


def tracing_context_set() -> bool:
    """Whether this thread has a ``TracingContext`` (torch's ``TracingContext.try_get()``).
    The thread's own ``__dict__`` is read: ``getattr`` with a default raises and catches an
    AttributeError when none is set, 2 µs of each direct call."""
    return guards_tls.__dict__.get("tracing_context") is not None


# --------------------------------------------------------------------------- verify / dry-run
#
# Verify re-checks, on sampled calls, the guards a policy dropped. torch has no public handle
# on them: ``CheckFunctionManager.__init__`` (torch/_dynamo/guards.py) builds a guard manager
# with *every* guard (its local ``guard_manager``) before it calls ``guard_filter_fn``, then
# builds the manager of the kept guards, which the cache entry holds. The filter, called from
# there, takes that local. What else is used:
#
# * ``eval_frame._debug_get_cache_entry_list(code)``: a code object's cache entries, in the
#   order torch tries them (``.guard_manager``, ``.code``, ``.compile_id``, ``.backend``);
# * ``_ExtraState.invalidate(cache_entry, DeletedGuardManagerWrapper(reason))``: what torch
#   itself does when an ID_MATCH'd object dies: that entry never matches again, the next call
#   compiles anew (the kept manager's ``cache_entry``/``extra_state`` are torch's non-owning
#   references to them);
# * ``get_guard_fail_reason_helper``: torch's text for the first guard of a manager that fails.

_CFM = getattr(_guards, "CheckFunctionManager", None)
_CFM_INIT = getattr(getattr(_CFM, "__init__", None), "__code__", None)
_DELETED = getattr(_guards, "DeletedGuardManagerWrapper", None)
_FAIL_REASON = getattr(_guards, "get_guard_fail_reason_helper", None)
_CACHE_ENTRIES = getattr(_c_eval_frame, "_debug_get_cache_entry_list", None)
_EXTRA_STATE = getattr(_c_eval_frame, "_ExtraState", None)

#: The locals of ``CheckFunctionManager.__init__`` read while its ``guard_filter_fn`` runs.
_CFM_LOCALS = ("self", "f_code", "output_graph", "cache_entries", "guard_manager", "sorted_guards",
               "existing_diff_guard_sources")


def _full_manager_built_before_filter(code: Any) -> bool:
    """Whether ``CheckFunctionManager.__init__`` stores its local ``guard_manager`` (the
    manager with every guard) before it stores ``filter_results`` (what the filter
    returned): the bytecode order of the first store of each."""
    first: dict[str, int] = {}
    for ins in _dis.get_instructions(code):
        for name in _stored_locals(ins):
            if name in ("guard_manager", "filter_results"):
                first.setdefault(name, ins.offset)
    return "guard_manager" in first and "filter_results" in first and \
        first["guard_manager"] < first["filter_results"]


def _stored_locals(ins: Any) -> tuple[str, ...]:
    """The local names bytecode instruction ``ins`` stores; Python 3.13 fuses stores into
    STORE_FAST_STORE_FAST (two names) and STORE_FAST_LOAD_FAST (the first name stored)."""
    if ins.opname in ("STORE_FAST", "STORE_DEREF"):
        return (ins.argval,)
    if ins.opname == "STORE_FAST_STORE_FAST":
        return tuple(ins.argval)
    if ins.opname == "STORE_FAST_LOAD_FAST":
        return (ins.argval[0],)
    return ()


def missing_for_verify() -> list[str]:
    """What ``verify`` and ``dry_run`` need and this torch lacks (empty on 2.13 and 2.14)."""
    absent = [name for name, value in {
        "torch._dynamo.guards.CheckFunctionManager.__init__": _CFM_INIT,
        "torch._dynamo.guards.DeletedGuardManagerWrapper": _DELETED,
        "torch._dynamo.guards.get_guard_fail_reason_helper": _FAIL_REASON,
        "torch._C._dynamo.eval_frame._debug_get_cache_entry_list": _CACHE_ENTRIES,
        "torch._C._dynamo.eval_frame._ExtraState.invalidate": getattr(_EXTRA_STATE, "invalidate", None),
    }.items() if value is None]
    if _CFM_INIT is not None:
        names = set(_CFM_INIT.co_varnames)
        absent += [f"CheckFunctionManager.__init__ local `{n}`" for n in _CFM_LOCALS if n not in names]
        if not absent and not _full_manager_built_before_filter(_CFM_INIT):
            absent.append("CheckFunctionManager.__init__ building the full guard manager before "
                          "it calls guard_filter_fn")
    return absent


def compiling_frame_locals() -> dict[str, Any]:
    """For a ``guard_filter_fn`` call in progress: the locals of torch's
    ``CheckFunctionManager.__init__`` named in ``_CFM_LOCALS`` (``guard_manager``: the manager
    with every guard; ``self``: the CheckFunctionManager, whose ``guard_manager`` attribute
    is the kept one once ``__init__`` is done; ``output_graph.local_scope``: the frame's
    locals). Raises RuntimeError when no such frame is on the stack."""
    frame = sys._getframe(1)
    try:
        while frame is not None and frame.f_code is not _CFM_INIT:
            frame = frame.f_back
        if frame is None:
            raise RuntimeError(
                f"guardpolicy verify/dry_run: guard_filter_fn was not called from "
                f"CheckFunctionManager.__init__ (torch {torch.__version__}); the full guard set "
                "cannot be kept")
        f_locals = frame.f_locals
        return {name: f_locals.get(name) for name in _CFM_LOCALS}
    finally:
        del frame


def build_guard_manager(cfm: Any, guards: list, locals_: dict[str, Any], guard_filter_fn: Any) -> Any:
    """A guard manager of ``guards`` only, built by torch's own builder
    (``CheckFunctionManager.build_guards``, as torch builds the kept manager)."""
    _, manager = cfm.build_guards(guards, locals_["existing_diff_guard_sources"], locals_["f_code"],
                                  locals_["output_graph"], False, guard_filter_fn=guard_filter_fn)
    return manager


def all_cache_entries(code: Any) -> list:
    """Every cache entry of ``code`` (all regions), in the order torch tries them."""
    return _CACHE_ENTRIES(code)


def is_deleted(manager: Any) -> bool:
    return isinstance(manager, _DELETED)


def invalidate(entry: Any, owner: Any, reason: str) -> bool:
    """Makes the cache entry ``entry`` never match again, as
    ``CheckFunctionManager.invalidate`` does when an ID_MATCH'd object dies: the entry gets a
    ``DeletedGuardManagerWrapper`` and so does ``owner`` (the CheckFunctionManager, when
    alive: its ID_MATCH finalizers keep it, and it would keep the old manager alive); the
    next call compiles anew. False when torch already dropped the entry."""
    manager = entry.guard_manager
    extra = getattr(manager, "extra_state", None)
    if extra is None or is_deleted(manager):
        return False
    deleted = _DELETED(reason)
    extra.invalidate(entry, deleted)
    if owner is not None and getattr(owner, "guard_manager", None) is manager:
        owner.guard_manager = deleted
    return True


def fail_reason(full: Any, kept: Any, f_locals: dict[str, Any]) -> tuple[str, list[str]]:
    """Why ``full`` fails on ``f_locals``: torch's reason text (its fail-reason helper, with
    the global scope and closure variables of the kept manager, which torch sets only on the
    manager it keeps) and the raw verbose code parts of the failing guard."""
    info = full.check_verbose(f_locals)
    parts = list(info.verbose_code_parts) if not info.result else []
    if full.global_scope is None:
        full.global_scope = kept.global_scope
    if full.closure_vars is None:
        full.closure_vars = kept.closure_vars
    try:
        text = _FAIL_REASON(full, f_locals, None, None).split("\nUser stack trace:", 1)[0]
        text = text[len("None: "):] if text.startswith("None: ") else text
        text = " ".join(text.split())  # torch pads the code part to 60 columns
    except Exception:  # the helper is a label: fall back to the code part
        text = "; ".join(p.split("  #")[0].strip() for p in parts)
    return text, parts


def leaf_sources(manager: Any) -> list[tuple[str, str]]:
    """``(verbose code part, source)`` of every leaf guard of a guard manager's tree, as torch
    holds them (``GuardManager.get_leaf_guards``, ``get_child_managers``, ``get_source``)."""
    out: list[tuple[str, str]] = []
    stack = [manager.root]
    while stack:
        node = stack.pop()
        source = node.get_source()
        for leaf in node.get_leaf_guards():
            out.extend((part, source) for part in leaf.verbose_code_parts())
        stack.extend(node.get_child_managers())
    return out


def torch_function_enabled() -> Any:
    """A context in which torch function dispatch is on (``torch._C._EnableTorchFunction``):
    torch builds guards with it off, and its global-state guard checks it."""
    return torch._C._EnableTorchFunction()
