"""What direct dispatch (``guardpolicy.runtime.call.dispatch``) reads of the state a call runs in:
a code object's cache entries in a Dynamo context's region and the backend each records, the
eval-frame callback, torch's global-state guard, the torch-function and functorch stacks,
tracing (jit, fx, Dynamo/AOT) and saved-tensor hooks, global ``nn.Module`` hooks, and
Dynamo's compile start/end callbacks (``torch._C._dynamo.eval_frame``, ``torch._C``,
``torch._guards``, ``torch._dynamo.callback_handler``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch._C._dynamo.eval_frame as _c_eval_frame
import torch._dynamo.eval_frame as _eval_frame

# Dynamo keeps a frame's compiled products on its code object: per cache entry the
# transformed code (``.code``) and the guard manager of the kept guards (``.guard_manager``,
# whose ``root.check(f_locals)`` is torch's own evaluation). ``CacheEntry`` objects are
# borrowed C++ references: never kept; the guard manager and the code are Python objects.
# When torch frees or invalidates an entry it sets ``guard_manager.cache_entry`` to None
# (torch/csrc/dynamo/cache_entry.cpp), which is how a captured entry is known dead.

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
    2.11 to 2.13 keep a module flag, 2.14 a thread-local one."""
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
        "torch.compiler.is_exporting": hasattr(torch.compiler, "is_exporting"),
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
