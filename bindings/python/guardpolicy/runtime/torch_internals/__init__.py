"""torch's private names, every one that guardpolicy uses, in one place: the torch boundary.

No other module of the package, and no script under bench/, names ``torch._dynamo``,
``torch._C``, ``torch._guards``, ``torch._inductor`` or ``torch._logging`` (a test,
tests/python/test_torch_boundary.py, fails when one does). Each name is looked up here once,
feature-detected, behind a function or attribute that says what it is for, and
``doctor.py`` reports which features this torch supports from the ``missing*()`` lists
(``missing``, ``missing_for_verify``, ``dispatch_missing``). Checked on torch 2.11.0, 2.12.1,
2.13.0, 2.14.1 and 2.15.0; what differs between them is said where it is read.

One module per torch subsystem; this package hands out their public names, and the rest of
guardpolicy reads them from here (``torch_internals.X``):

* ``context``: the compiled object's Dynamo context (``torch._dynamo.eval_frame``,
  ``convert_frame``): its compile callback, its per-call hooks, the compile lock, the stance
  and torch's refusal under it (``guardpolicy.runtime.compiled``, ``stats``, ``recovery``),
  and a frame torch stopped compiling at a recompile limit (``guard_filter``);
* ``call_state``: what direct dispatch reads of the state a call runs in (cache entries of a
  region, the eval-frame callback, global state, tracing; ``guardpolicy.runtime.call.dispatch``);
* ``guards``: guards and cache entries (``torch._dynamo.guards``): the frame being compiled
  and its full guard manager, what verify and the dry run build, invalidate and explain with,
  the guard-manager trees the tools walk;
* ``config``: Dynamo's config, counters, compile metrics, backends, ``torch._dynamo.optimize``;
* ``sources``: where a guard reads its value and what it checks (sources, guard types, the
  ``code`` field, value-guard float semantics);
* ``trace``: ``TORCH_LOGS``, ``TORCH_TRACE`` and callgrind's instrumentation;
* ``inductor``: ``mode=`` options and eager-matching random numbers (on 2.11 with the
  stride constraint for dropout of 2.12 and 2.13, which 2.11 lacks);
* ``eager``: ``nn.Module``'s global hooks, pytrees and aten ops under a dispatch mode (the
  mutation audit);
* ``graph``: the GraphModule a backend is handed, its installed parameters read per call
  (``guardpolicy.compile`` on a backend other than Inductor);
* ``lookup``: torch's cache lookup asked without a call, whether a miss would compile, and the
  settings a saved compile records (``guardpolicy.runtime.serving``).
"""

from __future__ import annotations

from .context import (DOCTOR_HINT, RECOMPILE_LIMIT_FAILURE, STANCE_MISS_MESSAGE, TORCH_DIR, OptimizedModule,
                      compile_lock, dynamo_context, eval_frame, hooks_of, is_stance_miss, missing, recompile_limit_hit)
from .call_state import (GlobalStateGuard, backend_of, cache_entries, dispatch_missing, functorch_depth,
                         functorch_pop_to, fx_tracing, get_eval_frame_callback, guards_tls, has_global_module_hooks,
                         is_jit_tracing, len_torch_function_stack, on_every_compile, saved_tensors_hooks_active,
                         tracing_context_set)
from .guards import (add_last_guard, all_cache_entries, build_guard_manager, cache_entries_of, compile_id, compiling_frame,
                     compiling_frame_locals, drop_manager, fail_reason, failing_guard, forget_export_info, guard_failures, guard_profiler, guard_tree_api, invalidate, is_deleted,
                     leaf_sources, missing_for_verify, retire, tensor_check, torch_function_enabled, uncount)
from .config import (DYNAMO_CONFIG, DYNAMO_LOGGER, INDUCTOR_CONFIG, MARK_DYNAMIC, clear_compilation_metrics, limit_hit, compilation_metrics, config_patch, config_value,
                     counters, dynamo_config, dynamo_optimize_replaced, has_config, lookup_backend)
from .sources import (closure_vars, duplicate_source, dynamo_sources, generic_attr_sources, guard_builder_names,
                      guard_code_source, guard_source_enum, installed_free, traced_code, value_guards_compare_bits)
from .trace import register_torch_log, trace_artifact, valgrind_toggle, valgrind_toggle_and_dump_stats
from .inductor import inductor_fallback_random, inductor_mode_options
from .eager import dispatch_mode, global_module_hooks, returns_alias, tree_map
from .graph import AttributeReads
from .lookup import (COMPILE_KNOBS, LookupEntry, at_recompile_limit, compile_identity, compile_knobs, current_region,
                     dynamo_skips, evaluate, failing_parts, fx_graph_cache_enabled, global_state_now, lookup_entries,
                     missing_for_serving, module_call_impl, passes, region_of, strip_local_scope, total_entries)

__all__ = [
    # context
    "DOCTOR_HINT", "RECOMPILE_LIMIT_FAILURE", "STANCE_MISS_MESSAGE", "TORCH_DIR", "OptimizedModule", "compile_lock",
    "dynamo_context", "eval_frame", "hooks_of", "is_stance_miss", "missing", "recompile_limit_hit",
    # call_state
    "GlobalStateGuard", "backend_of", "cache_entries", "dispatch_missing", "functorch_depth", "functorch_pop_to",
    "fx_tracing", "get_eval_frame_callback", "guards_tls", "has_global_module_hooks", "is_jit_tracing",
    "len_torch_function_stack", "on_every_compile", "saved_tensors_hooks_active", "tracing_context_set",
    # guards
    "add_last_guard", "all_cache_entries", "build_guard_manager", "cache_entries_of", "compile_id", "compiling_frame",
    "compiling_frame_locals", "drop_manager", "fail_reason", "failing_guard", "forget_export_info", "guard_failures", "guard_profiler", "guard_tree_api", "invalidate", "is_deleted",
    "leaf_sources", "missing_for_verify", "retire", "tensor_check", "torch_function_enabled", "uncount",
    # config
    "DYNAMO_CONFIG", "DYNAMO_LOGGER", "INDUCTOR_CONFIG", "MARK_DYNAMIC", "clear_compilation_metrics", "limit_hit", "compilation_metrics", "config_patch", "config_value", "counters",
    "dynamo_config", "dynamo_optimize_replaced", "has_config", "lookup_backend",
    # sources
    "closure_vars", "duplicate_source", "dynamo_sources", "generic_attr_sources", "guard_builder_names",
    "guard_code_source", "guard_source_enum", "installed_free", "traced_code", "value_guards_compare_bits",
    # trace
    "register_torch_log", "trace_artifact", "valgrind_toggle", "valgrind_toggle_and_dump_stats",
    # inductor
    "inductor_fallback_random", "inductor_mode_options",
    # eager
    "dispatch_mode", "global_module_hooks", "returns_alias", "tree_map",
    # graph
    "AttributeReads",
    # lookup
    "COMPILE_KNOBS", "LookupEntry", "at_recompile_limit", "compile_identity", "compile_knobs", "current_region",
    "dynamo_skips", "evaluate", "failing_parts", "fx_graph_cache_enabled", "global_state_now", "lookup_entries",
    "missing_for_serving", "module_call_impl", "passes", "region_of", "strip_local_scope", "total_entries",
]
