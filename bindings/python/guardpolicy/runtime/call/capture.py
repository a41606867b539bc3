"""What direct dispatch captures once warm-up is over (``dispatch.DirectDispatch``): per
cache entry of the frame, in torch's lookup order, its guard manager and a function running
its code (``Entry``), with how to bind the frame's locals and what the capture must find
unchanged on every call (``Target``); or why it refuses (``Refusal``). Runs on a quiet call
of the normal path, once per Dynamo compile generation (``GENERATION``), not on direct calls.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, Callable

import torch

from .. import torch_internals as _tp
from .frame_locals import frame_locals_binder

_FRAME_FLAGS_REFUSED = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                        | inspect.CO_ITERABLE_COROUTINE)
_RESUME_PREFIX = "__resume_at_"  # Dynamo's name for the continuation after a graph break

#: Bumped when any Dynamo compile starts or ends (``bump``): a capture of an older generation
#: is stale.
GENERATION = [0]


def bump(_args: Any = None) -> None:
    GENERATION[0] += 1


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a frame is not dispatched directly: ``reason`` and ``frame`` (``name at file:line``)."""

    reason: str
    frame: str

    def __str__(self) -> str:
        return f"{self.frame}: {self.reason}"


class Refused(Exception):
    """Raised while capturing: the frame is not dispatched directly (the message says why)."""


class Entry:
    """One captured cache entry: its guard manager and a function running its code."""

    __slots__ = ("manager", "root", "fn")

    def __init__(self, manager: Any, fn: Callable):
        self.manager = manager
        self.root = manager.root
        self.fn = fn


class Target:
    """What a capture found for one frame: its entries in lookup order and how to build its
    locals. ``lead`` is the first argument the frame takes before the call's own (the
    original module for an ``nn.Module``), or None. ``forward_owner``: what held the
    original module's ``forward`` at the capture, its instance ``forward`` or else its class."""

    __slots__ = ("entries", "bind", "lead", "module", "module_dict", "forward_owner", "generation",
                 "global_state", "check_function_modes", "check_saved_hooks", "path", "verify_every", "stance",
                 "fn", "code", "defaults", "kwdefaults")

    def __init__(self, entries: list[Entry], bind: Callable, lead: Any,
                 global_state: Any, check_function_modes: bool, check_saved_hooks: bool):
        self.module: Any = None  # the original module, for a module
        self.module_dict: Any = None  # its __dict__ (its hooks, its instance forward)
        self.forward_owner: Any = None
        self.path: Any = None  # verify's per-call path (call_path.CallPath), whose verify() runs
        self.verify_every = 0  # on every verify_every-th call
        self.stance: Any = None  # the object's ``stance.Stance``, whose call count a direct call counts
        self.fn: Any = None  # the frame's function, and its state the entries run with (captured)
        self.code = self.defaults = self.kwdefaults = None
        self.entries = entries
        self.bind = bind
        self.lead = lead
        self.generation = GENERATION[0]
        self.global_state = global_state
        self.check_function_modes = check_function_modes
        self.check_saved_hooks = check_saved_hooks


def entry_function(code: types.CodeType, fn: types.FunctionType) -> types.FunctionType:
    """A function running ``code`` (an entry's transformed code) as ``fn`` would run."""
    out = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def where(fn: Any) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return type(fn).__name__
    return f"{code.co_name} at {code.co_filename}:{code.co_firstlineno}"


def build(fn: Any, lead: Any, module: Any, ctx: Any, ours: Any, explanations: list) -> Target:
    """What a capture finds for the frame of ``fn`` (``lead``: the argument it takes first;
    ``module``: the original module, for a module) in the cache of ``ctx`` (the
    ``OptimizeContext``): its entries, each compiled by this object (``explanations``, its
    ``FrameExplanations``), and how to bind its locals. ``ours``: what this object's own
    per-call hook is bound to. Raises ``Refused`` for what direct dispatch cannot serve."""
    if not isinstance(fn, types.FunctionType):
        raise Refused(f"the compiled callable is a {type(fn).__name__}, not a Python function")
    code = fn.__code__
    if code.co_flags & _FRAME_FLAGS_REFUSED:
        raise Refused("the frame is a generator or coroutine")
    if module is not None:
        _check_module(module)
    _check_context_hooks(ctx, ours)
    entries, dropped = _entries(code, fn, ctx, explanations)
    target = Target(entries, frame_locals_binder(fn), lead,
                     _tp.GlobalStateGuard() if "GLOBAL_STATE" in dropped else None,
                     bool(dropped & {"TORCH_FUNCTION_STATE", "DEFAULT_DEVICE"}),
                     "AUTOGRAD_SAVED_TENSORS_HOOKS" in dropped)
    target.fn, target.code, target.defaults, target.kwdefaults = fn, code, fn.__defaults__, fn.__kwdefaults__
    if module is not None:  # the forward the normal path finds: the instance's, else the class's
        target.module, target.module_dict = module, module.__dict__
        target.forward_owner = module.__dict__.get("forward", type(module))
    return target

def _check_context_hooks(ctx: Any, ours: Any) -> None:
    """Refuses a Dynamo context with per-call hooks that do more than compile settings
    (a backend context, compiled autograd, an ``on_enter``)."""
    for hook in _tp.hooks_of(ctx):
        if getattr(hook, "__self__", None) is ours:
            continue
        name = getattr(hook, "__qualname__", type(hook).__name__)
        if "make_set_enable_dynamic" in name or "_make_closure_patcher" in name:
            continue  # config patched for compiles only
        if name.endswith("call_on_enter") and _runs_only(hook, _COMPILE_ONLY_ON_ENTER):
            continue
        raise Refused(f"the Dynamo context runs a per-call hook ({name}) that direct dispatch would skip")

def _entries(code: types.CodeType, fn: types.FunctionType, ctx: Any,
             explanations: list) -> tuple[list[Entry], set[str]]:
    """The captured entries of ``code`` in lookup order, and the ambient guard types
    (GLOBAL_STATE, ...) that at least one of them dropped."""
    backend = _tp.backend_of(ctx.callback)
    ours = {frame.frame.compile_id: frame for frame in explanations}
    entries, dropped = [], set()
    for raw in _tp.cache_entries(code, getattr(ctx, "_isolate_recompiles_id", -1)):
        entry_code, manager = raw.code, raw.guard_manager
        if not isinstance(entry_code, types.CodeType) or manager.cache_entry is None:
            continue  # invalidated: torch never picks it
        compile_id = str(raw.compile_id)
        if not (raw.backend is backend or raw.backend == backend):
            continue  # torch's lookup skips an entry of another backend (extra_state.cpp backend_match)
        explanations = ours.get(compile_id)
        if explanations is None:
            raise Refused(f"cache entry {compile_id} was not compiled by this object "
                           "(another torch.compile of the same code)")
        resume = [n for n in entry_code.co_names if n.startswith(_RESUME_PREFIX)]
        if resume:
            raise Refused(f"graph break: the code of cache entry {compile_id} continues in {resume[0]}")
        if entry_code.co_freevars != code.co_freevars:
            raise Refused(f"cache entry {compile_id} has other free variables than the frame")
        kept = {e.guard_type for e in explanations if e.keep}
        dropped |= {"GLOBAL_STATE", "TORCH_FUNCTION_STATE", "DEFAULT_DEVICE",
                    "AUTOGRAD_SAVED_TENSORS_HOOKS"} - kept
        entries.append(Entry(manager, entry_function(entry_code, fn)))
    if not entries:
        raise Refused("the frame has no cache entry (Dynamo compiled another frame or skipped it)")
    return entries, dropped


#: ``OptimizeContext``'s ``on_enter``: ``install_generation_tagging_init``, which patches
#: ``nn.Module.__init__`` once (on the first call, which took the normal path).
_COMPILE_ONLY_ON_ENTER = "OptimizeContext.__init__.<locals>.on_enter"


def _runs_only(hook: Any, qualname: str) -> bool:
    """Whether ``hook`` (torch's ``call_on_enter`` closure) calls the function ``qualname``."""
    cells = getattr(hook, "__closure__", None) or ()
    return len(cells) == 1 and getattr(cells[0].cell_contents, "__qualname__", None) == qualname


def _check_module(mod: Any) -> None:
    """Refuses modules whose calls need more than their ``forward``: lazy modules,
    FSDP-wrapped modules and modules with DTensor parameters."""
    if hasattr(mod, "_initialize_hook"):
        raise Refused("a lazy module (its pre-hooks initialize it)")
    if not torch.distributed.is_available():
        return
    from torch.distributed import fsdp
    from torch.distributed.tensor import DTensor

    fsdp_classes = tuple(c for c in (getattr(fsdp, "FullyShardedDataParallel", None),
                                     getattr(fsdp, "FSDPModule", None)) if c is not None)
    for sub in mod.modules():
        if isinstance(sub, fsdp_classes):
            raise Refused(f"an FSDP module ({type(sub).__name__})")
    for param in mod.parameters():
        if isinstance(param, DTensor):
            raise Refused("a module with DTensor parameters")
