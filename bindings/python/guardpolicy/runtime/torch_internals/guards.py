"""Guards and cache entries (``torch._dynamo.guards``, ``torch._C._dynamo.eval_frame``): the
frame being compiled and its full guard manager (``CheckFunctionManager``), what verify and
the dry run build, invalidate and explain with, and the cache entries and guard-manager trees
the tools walk.
"""

from __future__ import annotations

import dis as _dis
import sys
import weakref
from typing import Any

import torch
import torch._C._dynamo.eval_frame as _c_eval_frame
import torch._dynamo.guards as _guards

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
_CFM_LOCALS = ("self", "f_code", "output_graph", "guard_manager", "sorted_guards", "existing_diff_guard_sources")


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
    """What ``verify`` and ``dry_run`` need and this torch lacks (empty on 2.11 to 2.15)."""
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
    (``CheckFunctionManager.build_guards``, as torch builds the kept manager). Object aliasing
    (``DUPLICATE_INPUT``: ``a is b``) is added as torch adds it after the build where
    ``use_lamba_guard_for_object_aliasing`` is on (2.11 to 2.13): one lambda guard on the root."""
    forget_export_info(guards)
    builder, manager = cfm.build_guards(guards, locals_["existing_diff_guard_sources"], locals_["f_code"],
                                        locals_["output_graph"], False, guard_filter_fn=guard_filter_fn)
    aliasing = getattr(builder, "object_aliasing_guard_codes", None)
    if aliasing:
        codes, verbose = map(list, zip(*aliasing))
        builder.add_python_lambda_leaf_guard_to_root(codes, verbose)
    return manager


#: What ``Guard.set_export_info`` (torch/_guards.py) fills in on each build, and the value a guard
#: starts with.
_EXPORT_INFO = (("obj_weakref", None), ("guarded_class_weakref", None))


def forget_export_info(guards: list) -> None:
    """Resets what torch's guard builder wrote on each of ``guards`` (``Guard``) for export to
    what a guard starts with, so that torch's next build of them, after a ``guard_filter_fn``
    decided, records it afresh. With a filter torch builds every guard twice, and the second
    ``set_export_info`` compares the weak reference it made the first time with the new one
    (``obj_weakref in (obj_weakref, None)``): for an object whose ``==`` is elementwise, a
    tensor made from a numpy attribute (``torch.from_numpy(self.k)``), that raises "Boolean
    value of Tensor with more than one value is ambiguous" and the compile fails, where a
    ``torch.compile`` without a filter builds once and works (docs/soundness.md)."""
    for guard in guards:
        for name, start in _EXPORT_INFO:
            if getattr(guard, name, start) is not start:
                object.__setattr__(guard, name, start)


def add_last_guard(manager: Any, check: Any, text: str) -> list[str]:
    """Adds ``check(f_locals) -> bool`` to the kept guard manager ``manager`` of a cache entry,
    run after every other guard of it has passed (``RootGuardManager.add_epilogue_lambda_guard``,
    what torch uses for its own guards that must run last); ``text`` is its verbose code part,
    which torch's recompile reasons print when it fails. Returns the list holding ``text``,
    which the guard keeps and torch reads when it fails (``guard_manager.check_verbose``, just
    after ``check`` ran): its item set anew names what failed (torch 2.11-2.15 keep the list
    itself)."""
    parts = [text]
    manager.root.add_epilogue_lambda_guard(check, parts, None)
    return parts


def failing_guard(manager: Any, f_locals: dict) -> str:
    """The verbose code of the first guard of ``manager`` (a guard manager) that fails on
    ``f_locals``, as torch's recompile reasons print it (``check_verbose``); "" if none fails."""
    info = manager.check_verbose(f_locals)
    parts = info.verbose_code_parts
    return "" if info.result or not parts else str(parts[0])


def guard_failures(code: Any) -> list[str]:
    """torch's recompile reasons of ``code`` (an original code object) so far, one per cache
    entry it tried on each recompile, oldest first (``torch._dynamo.guards.guard_failures``,
    what ``TORCH_LOGS=recompiles`` prints: ``"0/1: self.step == 1  # ..."``); a copy. Empty
    on a torch without the record."""
    return list(getattr(_guards, "guard_failures", {}).get(code, ()))


def tensor_check(tensors: tuple) -> Any:
    """``check(*tensors) -> bool``: whether each tensor still has the dtype, device, shape,
    strides, ``requires_grad`` and dispatch keys it has now, in one C call (torch's
    ``torch._C._dynamo.guards.TensorGuards``, what ``TENSOR_MATCH`` checks, without dynamic
    dimensions)."""
    guards = torch._C._dynamo.guards.TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None)
    return guards.check


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


def drop_manager(owner: Any, manager: Any) -> None:
    """Makes torch's CheckFunctionManager ``owner`` hold a ``DeletedGuardManagerWrapper`` in
    place of ``manager`` (as ``invalidate`` does), once its cache entry is gone or holds another:
    its ID_MATCH finalizers keep ``owner`` alive, and it would keep ``manager`` alive, and what
    its guards hold in C++ (an epilogue guard's callable). One wrapper serves every owner (torch
    reads only its type there). Never while ``manager`` runs."""
    if _DELETED is None or getattr(owner, "guard_manager", None) is not manager:
        return
    if not _DROPPED:
        _DROPPED.append(_DELETED("guardpolicy: its watch let go of it"))
    owner.guard_manager = _DROPPED[0]


_DROPPED: list = []  # the one DeletedGuardManagerWrapper drop_manager gives, once made


class _Retired:
    """What a retired cache entry says it ID_MATCHes: alive, and never a frame's local."""


_RETIRED = _Retired()


def retire(entry: Any, reason: str) -> bool:
    """Invalidates the cache entry ``entry`` (``invalidate``) and keeps it out of the count
    torch compares with ``recompile_limit`` (``uncount``). False when torch already dropped
    the entry."""
    if not invalidate(entry, None, reason):
        return False
    uncount(entry.guard_manager)
    return True


def uncount(manager: Any) -> None:
    """Keeps the cache entry of the guard manager ``manager`` out of the count torch compares
    with ``recompile_limit``: torch counts the entries whose ID_MATCH'd objects are the frame's
    (``torch._dynamo.cache_size._has_same_id_matched_objs``), and this one's becomes a live
    object no frame holds. It changes no guard: safe while the entry's guards run."""
    manager.id_matched_objs = {"<guardpolicy: retired>": weakref.ref(_RETIRED)}


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


# What the tools (capture, audit, bench) and the scripts under bench/ walk: a compiled
# function's cache entries and their guard-manager trees.


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
