"""torch's private names, every one that guardpolicy uses, in one place: the torch boundary.

No other module of the package, and no script under bench/, names ``torch._dynamo``,
``torch._C``, ``torch._guards``, ``torch._inductor`` or ``torch._logging`` (a test,
tests/python/test_torch_boundary.py, fails when one does). Each name is looked up here once,
feature-detected, behind a function or attribute that says what it is for, and
``doctor.py`` reports which features this torch supports from the ``missing*()`` lists
below. Checked on torch 2.13.0, 2.14.1 and 2.15.0; what differs between them is said where
it is read.

torch has no public way to run code only when *one* compiled object compiles, or to give one
compiled object the ``skip_guard_eval_unsafe`` stance while others keep full guard
evaluation. Dynamo's own machinery offers both, privately:

* ``OptimizeContext.callback`` (``torch/_dynamo/eval_frame.py``): what the eval-frame hook
  calls on a cache miss of a frame run under this context, i.e. only when a frame compiles
  (or is first seen). Wrapping it scopes config knobs to this object's compiles.
* ``OptimizeContext.enter_exit_hooks``: called by ``compile_wrapper`` on every call of this
  context's compiled object, just before it reads ``eval_frame._stance`` to set the C flag
  ``skip_guard_eval_unsafe`` (a global on 2.13 and 2.14, per thread on 2.15, copied from the
  global stance on each compiled call); the hook's return value is called when the call ends.
* ``convert_frame.compile_lock``: the lock every Dynamo compile holds.
"""

from __future__ import annotations

import dis as _dis
import os
import sys
from typing import Any

import torch
import torch._C._dynamo.eval_frame as _c_eval_frame
import torch._dynamo.convert_frame as _convert_frame
import torch._dynamo.eval_frame as _eval_frame
import torch._dynamo.guards as _guards

#: Ends each "needs X, which torch V lacks" error.
DOCTOR_HINT = " (`python -m guardpolicy doctor` lists what works on this torch)"

#: The module users set Dynamo's knobs on, as messages name it (``--dynamo-config``, doctor).
DYNAMO_CONFIG = "torch._dynamo.config"

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


# -- direct dispatch (guardpolicy.runtime.dispatch) ------------------------------------------------
#
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


def compiling_frame() -> dict[str, Any] | None:
    """The frame torch is building guards for, for a ``guard_filter_fn`` call in progress: the
    locals of torch's ``CheckFunctionManager.__init__`` named in ``_CFM_LOCALS``
    (``f_code``: the code being compiled; ``output_graph``: its ``local_scope`` and
    ``global_scope`` are the frame's; ``guard_manager``: the manager with every guard;
    ``self``: the CheckFunctionManager, whose ``guard_manager`` attribute is the kept one once
    ``__init__`` is done). None when no such frame is on the stack. The one stack walk of the
    package: verify, dry-run, explain's frame label and the mutation audit all read it."""
    if _CFM_INIT is None:
        return None
    frame = sys._getframe(1)
    try:
        while frame is not None and frame.f_code is not _CFM_INIT:
            frame = frame.f_back
        if frame is None:
            return None
        f_locals = frame.f_locals
        return {name: f_locals.get(name) for name in _CFM_LOCALS}
    finally:
        del frame


def compiling_frame_locals() -> dict[str, Any]:
    """``compiling_frame()``, or RuntimeError when no such frame is on the stack (what verify
    and dry-run need: without it the full guard set cannot be kept)."""
    found = compiling_frame()
    if found is None:
        raise RuntimeError(
            f"guardpolicy verify/dry_run: guard_filter_fn was not called from "
            f"CheckFunctionManager.__init__ (torch {torch.__version__}); the full guard set "
            "cannot be kept")
    return found


def compile_id() -> str:
    """Dynamo's id of the compile in progress (``"0/0"``: frame 0, its first compile), from
    ``torch._guards.CompileContext.current_compile_id()``; "" outside a compile."""
    context = getattr(torch._guards, "CompileContext", None)
    cid = context.current_compile_id() if context is not None else None
    return "" if cid is None else str(cid)


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


# --------------------------------------------------------------------------- the tools and bench/
#
# What the Python tools (capture, audit, suggest, bench) and the scripts under bench/ read of
# Dynamo: its config, its counters and compile metrics, backends by name, the cache entries and
# guard trees of a compiled function, and the sources a guard reads its value through.


def config_patch(**knobs: Any) -> Any:
    """A context manager setting ``torch._dynamo.config`` knobs (``recompile_limit=64``,
    ``install_free_tensors=True``) for its body, as ``torch._dynamo.config.patch``."""
    return torch._dynamo.config.patch(**knobs)


def config_value(name: str) -> Any:
    """The current value of the ``torch._dynamo.config`` knob ``name``; AttributeError when
    this torch has no such knob."""
    return getattr(torch._dynamo.config, name)


def has_config(name: str) -> bool:
    """Whether ``torch._dynamo.config`` has the knob ``name``."""
    return hasattr(torch._dynamo.config, name)


def counters() -> Any:
    """Dynamo's event counters (``torch._dynamo.utils.counters``: ``counters["stats"]
    ["unique_graphs"]``, ``counters["recompiles"]``, ...), a dict of ``Counter`` objects."""
    import torch._dynamo.utils

    return torch._dynamo.utils.counters


def compilation_metrics() -> list:
    """Dynamo's ``CompilationMetrics`` records since the last ``clear_compilation_metrics()``
    (one per frame compile: ``entire_frame_compile_time_s``, ``guard_count``, ...)."""
    import torch._dynamo.utils

    return list(torch._dynamo.utils.get_compilation_metrics())


def clear_compilation_metrics() -> None:
    import torch._dynamo.utils

    torch._dynamo.utils.clear_compilation_metrics()


def lookup_backend(name: str) -> Any:
    """The registered ``torch.compile`` backend function called ``name`` ("eager",
    "inductor"); torch's error for an unknown name."""
    return torch._dynamo.lookup_backend(name)


def inductor_mode_options(mode: str) -> dict:
    """The Inductor options a ``torch.compile(mode=...)`` stands for
    (``torch._inductor.list_mode_options``)."""
    from torch._inductor import list_mode_options

    return dict(list_mode_options(mode))


def cache_entries_of(fn: Any) -> list:
    """The cache entries Dynamo holds for the code of ``fn`` (a function, or ``type(model)
    .forward``), in the order it tries them; borrowed references: read them at once."""
    return list(_CACHE_ENTRIES(getattr(fn, "__code__", fn)))


def guard_tree_api() -> bool:
    """Whether guard managers expose their tree (``get_leaf_guards``, ``get_child_managers``,
    ``RootGuardManager``), which guard counting and ``leaf_sources`` walk."""
    g = getattr(torch._C._dynamo, "guards", None)
    return (_CACHE_ENTRIES is not None and g is not None and hasattr(g, "RootGuardManager")
            and all(hasattr(g.GuardManager, m) for m in ("get_leaf_guards", "get_child_managers")))


def guard_profiler() -> Any:
    """``torch._C._dynamo.guards.profile_guard_manager(root, f_locals, n)`` (µs for one
    check of a guard manager, averaged over ``n``), or None on a torch without it."""
    return getattr(getattr(torch._C._dynamo, "guards", None), "profile_guard_manager", None)


def closure_vars() -> dict:
    """The names torch's guard code evaluates with beside ``L`` and ``G`` (``___check_obj_id``,
    ``___check_type_id``, ...): ``torch._dynamo.guards._get_closure_vars()``."""
    return _guards._get_closure_vars()


def dynamo_sources() -> Any:
    """The module of Dynamo's source classes (``torch._dynamo.source``: ``LocalSource``,
    ``GlobalSource``, ``AttrSource``, ``DictGetItemSource``, ...), which say where a guarded
    value is read from (``Source.get_value``)."""
    import torch._dynamo.source

    return torch._dynamo.source


def guard_source_enum() -> Any:
    """``torch._guards.GuardSource``, the enum of where a guarded value lives."""
    return torch._guards.GuardSource


def guard_builder_names() -> list[str]:
    """The guard types this torch produces: the names of ``GUARD_VALUE_DISPATCH``
    (``torch._dynamo.guards``; 46 on 2.13, 47 on 2.14, 49 on 2.15), sorted."""
    return sorted(getattr(_guards, "GUARD_VALUE_DISPATCH", {}))


def guard_code_source() -> str:
    """Where the ``code`` field is read from on this torch: ``"code_parts"``
    (``GuardFilterEntry.code_parts``, 2.15), ``"code_list"`` (``Guard.code_list``, read while
    the filter runs: 2.13, 2.14), or "" when neither exists."""
    import dataclasses

    import torch._dynamo.types

    def fields(cls: Any) -> set[str]:
        if dataclasses.is_dataclass(cls):
            return {f.name for f in dataclasses.fields(cls)}
        return set(getattr(cls, "_fields", ())) | set(getattr(cls, "__annotations__", {}))

    if "code_parts" in fields(getattr(torch._dynamo.types, "GuardFilterEntry", None)):
        return "code_parts"
    return "code_list" if "code_list" in fields(getattr(torch._guards, "Guard", None)) else ""


def value_guards_compare_bits() -> bool:
    """Whether value guards (EQUALS_MATCH, CONSTANT_MATCH, ...) compare floats bit for bit
    (torch 2.15, ``torch._dynamo.utils.constants_identical``: ``0.0`` and ``-0.0`` differ,
    NaN equals NaN) rather than with ``==`` (2.13, 2.14: ``0.0 == -0.0``, NaN never equal)."""
    import torch._dynamo.utils

    return hasattr(torch._dynamo.utils, "constants_identical")


class dynamo_optimize_replaced:  # noqa: N801 - a context manager, named for what it does
    """Within the block, ``torch._dynamo.optimize`` is ``replacement(original, *args,
    **kwargs)``: how ``capture`` sees filters passed through the legacy entry point. The
    original is restored on exit, whatever happened."""

    def __init__(self, replacement: Any) -> None:
        self._replacement = replacement
        self._original: Any = None

    def __enter__(self) -> Any:
        import torch._dynamo

        self._original = original = torch._dynamo.optimize
        torch._dynamo.optimize = lambda *a, **kw: self._replacement(original, *a, **kw)
        return original

    def __exit__(self, *exc: Any) -> None:
        import torch._dynamo

        torch._dynamo.optimize = self._original


def valgrind_toggle() -> None:
    """Starts or stops callgrind's instrumentation (``torch._C._valgrind_toggle``)."""
    torch._C._valgrind_toggle()


def valgrind_toggle_and_dump_stats() -> None:
    """Stops callgrind's instrumentation and dumps its counts (``torch._C.
    _valgrind_toggle_and_dump_stats``)."""
    torch._C._valgrind_toggle_and_dump_stats()


# --------------------------------------------------------------------------- torch's logs
#
# TORCH_LOGS=guardpolicy (INFO) and TORCH_LOGS=+guardpolicy (DEBUG) name the `guardpolicy`
# logger: torch accepts any importable module there, and ``register_log`` also lets
# ``torch._logging.set_logs(guardpolicy=logging.DEBUG)`` name it. TORCH_TRACE's structured
# trace takes artifacts under the compile id in progress (``trace_structured_artifact``),
# which tlparse lists beside torch's own for that compile.


def register_torch_log(setting: str, logger_name: str) -> bool:
    """Registers ``logger_name`` with torch's logging under ``setting`` (``TORCH_LOGS`` and
    ``torch._logging.set_logs``), as torch registers its own in
    ``torch/_logging/_registrations.py``. False on a torch without ``register_log``."""
    internal = getattr(getattr(torch, "_logging", None), "_internal", None)
    register = getattr(internal, "register_log", None)
    if register is None:
        return False
    if setting not in getattr(getattr(internal, "log_registry", None), "log_alias_to_log_qnames", {}):
        register(setting, logger_name)
    return True


def trace_artifact(name: str, payload_fn: Any) -> None:
    """Writes ``payload_fn()`` (a JSON-able object) to TORCH_TRACE's structured trace as the
    artifact ``name`` of the compile in progress; nothing when no trace is being written
    (torch checks that first, so ``payload_fn`` is then never called)."""
    trace = getattr(getattr(torch, "_logging", None), "trace_structured", None)
    if trace is not None:
        trace("artifact", metadata_fn=lambda: {"name": name, "encoding": "json"}, payload_fn=payload_fn)


# -- the stance that recovers (guardpolicy.runtime.recovery) ---------------------------------------
#
# Under ``skip_guard_eval_unsafe`` torch's C lookup (torch/csrc/dynamo/eval_frame_cpp.cpp)
# runs each cache entry's differentiating guards only; when none matches it raises a
# RuntimeError instead of compiling. The message is torch's only mark of that failure.

#: How that RuntimeError's message starts (torch 2.6 to 2.15, checked in the 2.15 wheel).
STANCE_MISS_MESSAGE = "Recompilation triggered with skip_guard_eval_unsafe stance"

#: torch's package directory: a traceback whose frames are all in it ran no user code.
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def is_stance_miss(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's refusal to compile under the ``skip_guard_eval_unsafe``
    stance (a call that no cache entry's differentiating guards accept)."""
    return type(exc) is RuntimeError and str(exc).startswith(STANCE_MISS_MESSAGE)

# --------------------------------------------------------------------------- audit and suggest
#
# What the mutation audit (guardpolicy.tools.mutation*) needs that torch does not offer
# publicly: Inductor's eager-matching random numbers and the process-wide nn.Module hook dicts
# (state a trial must leave as it found it). The guard's own check code is the schema field
# `code` (guardpolicy.api.entry_code).


def inductor_fallback_random() -> Any:
    """A context in which Inductor draws random numbers as eager does
    (``torch._inductor.config.fallback_random``), so a seeded compiled call of a model with
    dropout or ``torch.rand*`` can equal a seeded eager call; a null context where the
    setting does not exist."""
    import contextlib

    try:
        import torch._inductor.config as inductor_config
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(inductor_config, "fallback_random"):
        return contextlib.nullcontext()
    return inductor_config.patch(fallback_random=True)


def global_module_hooks() -> list[tuple[str, dict]]:
    """``(name, dict)`` of the process-wide ``nn.Module`` hook dicts
    (``torch.nn.modules.module._global_forward_hooks`` and kin)."""
    import torch.nn.modules.module as module_mod

    return [(name, value) for name, value in vars(module_mod).items()
            if name.startswith("_global_") and name.endswith("hooks") and isinstance(value, dict)]


def tree_map(fn: Any, tree: Any) -> Any:
    """``fn`` applied to every leaf of a pytree of lists, tuples, dicts and torch's registered
    containers (``ModelOutput`` among them), the structure kept: ``torch.utils._pytree.
    tree_map``."""
    from torch.utils import _pytree

    return _pytree.tree_map(fn, tree)


def dispatch_mode() -> type:
    """``torch.utils._python_dispatch.TorchDispatchMode``: the base class of a mode that sees
    every aten op an eager call runs (the mutation audit sizes a trial's call with one)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def returns_alias(op: Any) -> bool:
    """Whether the aten ``op`` returns a view of an input or the input itself (its schema's
    return has alias info: ``expand``, ``add_``), so its output allocates no new storage."""
    return any(r.alias_info is not None for r in op._schema.returns)
