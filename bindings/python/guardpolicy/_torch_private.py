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

from typing import Any

import torch
import torch._dynamo.convert_frame as _convert_frame
import torch._dynamo.eval_frame as _eval_frame

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
    import torch.nn.modules.module as nn_module

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
        "torch.nn.modules.module._has_any_global_hook": hasattr(nn_module, "_has_any_global_hook"),
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


def has_global_module_hooks() -> bool:
    import torch.nn.modules.module as nn_module

    return nn_module._has_any_global_hook()
