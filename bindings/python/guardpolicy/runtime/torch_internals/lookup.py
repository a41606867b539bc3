"""torch's cache lookup, asked without a call (``guardpolicy.runtime.serving``): a code object's
cache entries in the order Dynamo tries them for one compiled object (its region, its
backend), what each entry's guard manager says of a set of frame locals and which guard
fails, whether a cache miss would make Dynamo compile the frame (its skip rules and the
recompile limit), Dynamo's settings that change what a compile produces, and the Inductor
FX graph cache that torch's mega-cache needs (``torch._C._dynamo.eval_frame``,
``torch._dynamo.guards``, ``convert_frame``, ``trace_rules``, ``cache_size``,
``torch._inductor.config``).

What torch's lookup does (torch/csrc/dynamo/extra_state.cpp ``lookup``, 2.11 to 2.15): for
each cache entry of the code, most recently used first, an entry compiled by another backend
is passed over; the first whose root guard manager passes on the frame locals serves the
call; under the ``skip_guard_eval_unsafe`` stance the entry's differentiating guards
(``diff_guard_root``) are run instead. With ``isolate_recompiles`` (torch 2.13+), a region's own
entries come first, then the default region's.
"""

from __future__ import annotations

import re
import types
import warnings
from typing import Any

import torch
import torch._C._dynamo.eval_frame as _c_eval_frame
import torch._dynamo.guards as _guards

from .call_state import backend_of

_REGION_ENTRIES = getattr(_c_eval_frame, "_get_cache_entries_for_region", None)
_ALL_ENTRIES = getattr(_c_eval_frame, "_debug_get_cache_entry_list", None)
_STRIP_LOCAL = getattr(_guards, "strip_local_scope", None)

#: Dynamo's knobs that change what a compile produces from the same frame (dynamic shapes,
#: specialization): part of a saved compile's header. Read where this torch has them.
COMPILE_KNOBS = ("assume_static_by_default", "automatic_dynamic_shapes", "specialize_int", "specialize_float",
                 "allow_unspec_int_on_nn_module", "force_parameter_static_shapes",
                 "force_nn_module_property_static_shapes", "capture_scalar_outputs",
                 "capture_dynamic_output_shape_ops", "install_free_tensors", "use_recursive_dict_tags_for_guards")


def missing_for_serving() -> list[str]:
    """What ``gp.would_recompile``, ``gp.coverage`` and ``gp.serving`` need and this torch
    lacks (empty on 2.11 to 2.15)."""
    wanted = {
        "torch._C._dynamo.eval_frame._debug_get_cache_entry_list": _ALL_ENTRIES,
        "torch._dynamo.guards.GuardManagerWrapper.check_verbose": getattr(
            getattr(_guards, "GuardManagerWrapper", None), "check_verbose", None),
    }
    return [name for name, value in wanted.items() if value is None]


class LookupEntry:
    """One cache entry as torch's lookup meets it: Dynamo's ``compile_id`` (``"0/1"``), its
    kept guard ``manager`` (a ``GuardManagerWrapper``: ``check``, ``check_verbose``) and
    ``resumes``, the continuations after a graph break its transformed code calls
    (``__resume_at_...``). Holds no ``CacheEntry`` (a borrowed C++ reference)."""

    __slots__ = ("compile_id", "manager", "resumes")

    def __init__(self, compile_id: str, manager: Any, resumes: tuple[str, ...]):
        self.compile_id = compile_id
        self.manager = manager
        self.resumes = resumes


#: The attribute of a guard manager (``GuardManagerWrapper``, a Python object of torch's) where
#: what never changes of its cache entry is kept once read (``_Fixed``): a question then costs
#: torch's check, not torch's ``CompileId.__str__`` and a pybind11 read per field.
_READ = "_guardpolicy_lookup"
_RESUME_PREFIX = "__resume_at_"  # Dynamo's name for the continuation after a graph break


class _Fixed:
    """What never changes of a cache entry: ``compile_id``, ``resumes`` and ``compiled`` (its
    code is a code object; torch never picks an entry without one). Holds no manager and no
    backend: it is kept in the manager's own dict, which torch may keep after the entry is
    gone, and a user's backend may hold their model."""

    __slots__ = ("compile_id", "resumes", "compiled")

    def __init__(self, entry: Any):
        self.compile_id = str(entry.compile_id)
        self.compiled = isinstance(entry.code, types.CodeType)
        self.resumes = tuple(n for n in entry.code.co_names if n.startswith(_RESUME_PREFIX)) if self.compiled else ()


def _fixed(entry: Any, manager: Any) -> _Fixed:
    own = getattr(manager, "__dict__", None)
    found = own.get(_READ) if own is not None else None
    if found is None:
        found = _Fixed(entry)
        if own is not None:
            own[_READ] = found
    return found


def region_of(ctx: Any) -> int:
    """The ``isolate_recompiles`` region of a compiled object's ``OptimizeContext`` (-1: the
    default region; always -1 on a torch without regions)."""
    region = getattr(ctx, "_isolate_recompiles_id", -1)
    return region if isinstance(region, int) else -1


def current_region() -> int:
    """The ``isolate_recompiles`` region of the Dynamo context running now (-1 outside one,
    and on a torch without regions)."""
    reader = getattr(_c_eval_frame, "get_eval_frame_isolate_recompiles_id", None)
    try:
        return int(reader()) if reader is not None else -1
    except Exception:  # noqa: BLE001
        return -1


def _region_entries(code: types.CodeType, region: int) -> list:
    """The raw cache entries torch's lookup tries in ``region``: its own, then the default
    region's, or every entry of the code (a torch without regions)."""
    if _REGION_ENTRIES is None:
        return list(_ALL_ENTRIES(code))
    raw = list(_REGION_ENTRIES(code, region))
    if region >= 0:
        raw += list(_REGION_ENTRIES(code, -1))
    return raw


def lookup_entries(code: types.CodeType, callback: Any = None, region: int = -1) -> list[LookupEntry]:
    """The cache entries torch's lookup tries for a frame of ``code`` run with the Dynamo
    callback ``callback`` (the compiled object's ``OptimizeContext.callback``, whose backend
    an entry must have; None: any backend) in ``region`` (``region_of``), in its order;
    invalidated entries left out."""
    backend = backend_of(callback) if callback is not None else None
    out = []
    for entry in _region_entries(code, region):
        manager = entry.guard_manager
        fixed = _fixed(entry, manager)
        if not fixed.compiled or getattr(manager, "cache_entry", None) is None:
            continue  # invalidated: torch never picks it
        if backend is not None and not (entry.backend is backend or entry.backend == backend):
            continue  # extra_state.cpp backend_match
        out.append(LookupEntry(fixed.compile_id, manager, fixed.resumes))
    return out


def module_call_impl() -> Any:
    """``torch.nn.Module._call_impl``: what a module compiled in place (``nn.Module.compile()``)
    hands ``torch.compile``; Dynamo skips its frame (a torch file) and compiles ``forward``'s."""
    return torch.nn.Module._call_impl


def total_entries(code: types.CodeType) -> int:
    """Every cache entry Dynamo holds for ``code``, all regions and backends."""
    return len(_ALL_ENTRIES(code))


def passes(manager: Any, f_locals: dict[str, Any], stance_skips: bool = False) -> bool:
    """Whether the entry of ``manager`` serves a call with ``f_locals``, as torch's lookup
    decides it: its root manager's ``check``, or under the ``skip_guard_eval_unsafe`` stance
    (``stance_skips``) its differentiating guards only (none prepared: every guard skipped)."""
    if stance_skips:
        diff = getattr(manager, "diff_guard_root", None)
        return True if diff is None else bool(diff.check(f_locals))
    return manager.root.check(f_locals)  # what GuardManagerWrapper.check runs, without its Python frame


def guard_scope(manager: Any, f_locals: dict[str, Any]) -> dict[str, Any]:
    """The names a guard's code part is evaluated with (``L``, ``G`` and the manager's closure
    variables: ``___check_obj_id``, ...), as torch's ``get_guard_fail_reason_helper`` builds
    them; ``L`` alone where torch set neither on the manager."""
    scope: dict[str, Any] = {"L": f_locals}
    globals_ = getattr(manager, "global_scope", None)
    if isinstance(globals_, dict):
        scope["G"] = globals_.get("G", globals_)
    closure = getattr(manager, "closure_vars", None)
    if isinstance(closure, dict):
        scope.update(closure)
    return scope


def failing_parts(manager: Any, f_locals: dict[str, Any]) -> list[str]:
    """What fails on ``f_locals`` in the guard manager ``manager`` (empty when it passes):
    torch's ``check_verbose`` text, a single sentence for a tensor's metadata (``tensor
    'L['x']' size mismatch at index 0. expected 2, actual 3``) or the guard's code parts; of
    several code parts (a ``SHAPE_ENV`` guard), the first that evaluates false, as torch's
    ``get_guard_fail_reason_helper`` finds it."""
    info = manager.check_verbose(f_locals)
    if info.result:
        return []
    parts = [str(p) for p in info.verbose_code_parts]
    if len(parts) <= 1:
        return parts
    scope = guard_scope(manager, f_locals)
    globals_ = dict(getattr(manager, "global_scope", None) or {})
    for part in parts:
        try:
            if eval(part.split("  #", 1)[0], globals_, scope) is False:  # noqa: S307 - torch's guard code
                return [part]
        except Exception:  # noqa: BLE001 - torch's helper skips a part it cannot evaluate
            continue
    return parts[:1]


def evaluate(code: str, manager: Any, f_locals: dict[str, Any]) -> Any:
    """The value of the expression ``code`` (a guard code's operand, ``L['self'].n``) in
    ``manager``'s guard scope; raises what evaluating it raises."""
    globals_ = dict(getattr(manager, "global_scope", None) or {})
    return eval(code, globals_, guard_scope(manager, f_locals))  # noqa: S307 - torch's guard code


def strip_local_scope(text: str) -> str:
    """``L['x']`` -> ``x`` in ``text``, as torch words recompile reasons and guard names."""
    if _STRIP_LOCAL is not None:
        return _STRIP_LOCAL(text)
    return re.sub(r"L\[\s*['\"](.*?)['\"]\s*\]", r"\1", text)


def global_state_now() -> dict[str, Any]:
    """The ambient state a ``GLOBAL_STATE`` guard compares, by the names torch's failure text
    uses (``grad_mode``, ...), where it can be read publicly."""
    return {"grad_mode": torch.is_grad_enabled(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "default_dtype": torch.get_default_dtype(),
            "torch_function": torch._C._is_torch_function_enabled()}


# -- would a cache miss compile? (guardpolicy.runtime.serving.scope) -------------------------
#
# On a cache miss Dynamo's callback (convert_frame.CatchErrorsWrapper, ConvertFrameAssert)
# returns without compiling for a frame in its skip files, a frame already executing, a
# Dynamo-generated code object, ``config.disable``, a frame without tensors, and once the code
# holds ``recompile_limit`` entries with the same ID_MATCH'd objects (2.11 to 2.15).

def dynamo_skips(frame: Any) -> bool:
    """Whether Dynamo's callback, given the frame ``frame`` (its ``DynamoFrameType``) on a
    cache miss, returns without compiling: its early returns above, read from torch."""
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.trace_rules as trace_rules

    code = frame.f_code
    if torch._dynamo.config.disable or code in getattr(convert_frame, "output_codes", ()):
        return True
    if code.co_name == "__setattr__" or (code.co_filename == "<string>" and code.co_name in ("<module>", "__new__")):
        return True
    try:
        if trace_rules.check(code):
            return True
    except Exception:  # noqa: BLE001 - a torch whose check takes other arguments: not a skip file
        pass
    has_tensor = getattr(convert_frame, "has_tensor_in_frame", None)
    try:
        return has_tensor is not None and not has_tensor(frame)
    except Exception:  # noqa: BLE001
        return False


class _Frame:
    """What torch's cache-size count reads of a frame: its locals."""

    def __init__(self, f_locals: dict[str, Any]):
        self.f_locals = f_locals


def at_recompile_limit(code: types.CodeType, region: int, f_locals: dict[str, Any]) -> bool:
    """Whether a miss of ``code`` (in ``region``) with ``f_locals`` would find the code at
    ``recompile_limit`` (or ``accumulated_recompile_limit``): torch would run the frame
    eagerly instead of compiling (``cache_size.compute_cache_size``; on a torch without it,
    the entries counted)."""
    import torch._dynamo.cache_size as cache_size

    config = torch._dynamo.config
    limit = getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8))
    raw = list(_REGION_ENTRIES(code, region)) if _REGION_ENTRIES is not None else list(_ALL_ENTRIES(code))
    try:
        try:
            size = cache_size.compute_cache_size(_Frame(f_locals), raw, total_entries(code))
        except TypeError:  # 2.11-2.13: no count over every region
            size = cache_size.compute_cache_size(_Frame(f_locals), raw)
        accumulated = getattr(config, "accumulated_recompile_limit", getattr(config, "accumulated_cache_size_limit", 256))
        return bool(size.will_compilation_exceed(limit)) or size.num_cache_entries >= accumulated
    except Exception:  # noqa: BLE001 - torch's count changed: count the entries
        return len(raw) >= limit


def compile_knobs() -> dict[str, Any]:
    """``COMPILE_KNOBS`` that this torch has, with their values now (plain values; a knob
    this torch deprecated is read without its warning)."""
    config = torch._dynamo.config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: _plain(getattr(config, name)) for name in COMPILE_KNOBS if hasattr(config, name)}


def fx_graph_cache_enabled() -> bool:
    """Whether Inductor's FX graph cache is on (``torch._inductor.config.fx_graph_cache``),
    without which torch's mega-cache records nothing for Inductor to reuse."""
    import torch._inductor.config as inductor_config

    return bool(getattr(inductor_config, "fx_graph_cache", False))


def compile_identity(ctx: Any) -> dict[str, Any]:
    """What a compiled object's ``OptimizeContext`` compiles with, as plain values: the
    backend's ``backend`` name (``inductor``, ``eager``, a function's name) and, for Inductor,
    its ``options`` (what ``mode=``/``options=`` set, ``guard_filter_fn`` left out), and
    ``torch.compile``'s ``dynamic`` (None, True, False)."""
    backend = backend_of(getattr(ctx, "callback", None))
    inner = getattr(backend, "backend", backend)  # guardpolicy's AttributeReads(backend) holds it
    name = getattr(inner, "compiler_name", None) or getattr(inner, "__name__", None) or type(inner).__name__
    out: dict[str, Any] = {"backend": str(name), "dynamic": _plain(getattr(ctx, "_dynamic", None))}
    options = getattr(inner, "config", None)
    if isinstance(options, dict):
        out["options"] = {str(k): _plain(v) for k, v in sorted(options.items()) if k != "guard_filter_fn"}
    return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
