"""The first frame of a compiled object, as Dynamo meets it on a call (``TopFrame``): which
function's frame it is, the argument it takes first (the original module, bound to
``self``), the ``OptimizeContext`` whose cache region and backend torch's lookup uses, and
the frame locals a call binds (``TopFrame.bind``), made by CPython itself
(``call.frame_locals.frame_locals_binder``), as verify and direct dispatch bind them.

* ``guardpolicy.compile(module)`` and ``torch.compile(module)`` (an ``OptimizedModule``):
  the frame is the original module's ``forward`` with ``self`` bound (its hooks run outside
  Dynamo, before it); for a torch.nn module whose ``forward`` Dynamo does not trace as a frame,
  torch's wrapper function (``external_utils.wrap_inline``) around the module.
* a module compiled in place (``inplace=True``, ``nn.Module.compile()``): torch compiles
  ``Module._call_impl``, which Dynamo skips: the frame is the module's ``forward``, as above.
* a function (``guardpolicy.compile(fn)``, ``torch.compile(fn)``, with verify's path or direct
  dispatch around it): the function, a bound method's ``self`` first.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable

from ..call.frame_locals import frame_locals_binder
from ..frames import CompiledFrame, code_frame
from ..stats import CompileStats, stats


@dataclasses.dataclass
class TopFrame:
    """The first frame of a compiled object: ``function`` (a Python function), ``lead`` (what
    it takes first before the call's own arguments, or None), ``ctx`` (the
    ``OptimizeContext``), ``stats`` (guardpolicy's ``CompileStats``, or None for a plain
    ``torch.compile`` result) and ``binder``."""

    function: types.FunctionType
    lead: Any
    ctx: Any
    stats: CompileStats | None
    binder: Callable[..., dict]

    @property
    def code(self) -> types.CodeType:
        return self.function.__code__

    @property
    def label(self) -> CompiledFrame:
        return code_frame(self.code)

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """The locals the frame starts with for a call ``(*args, **kwargs)``. Raises
        TypeError as the call itself would (missing or unexpected arguments)."""
        if self.lead is not None:
            return self.binder(self.lead, *args, **kwargs)
        return self.binder(*args, **kwargs)


_BINDERS: dict[Any, Callable[..., dict]] = {}


def top_frame(compiled: Any) -> TopFrame:
    """The ``TopFrame`` of ``compiled`` (see the module docstring). Raises TypeError for
    anything that is not a compiled object whose first frame is a Python function."""
    from .. import torch_internals as _tp

    stats = _stats_of(compiled)
    if isinstance(compiled, _tp.OptimizedModule):
        fn, lead = _module_frame(compiled)
        ctx = compiled.dynamo_ctx
    else:
        inplace = getattr(compiled, "__dict__", {}).get("_compiled_call_impl")
        target = inplace if inplace is not None else compiled
        ctx = _context(target)
        original = _original(target)
        if isinstance(original, types.MethodType) and original.__func__ is _tp.module_call_impl():
            fn, lead = _forward_of(original.__self__)  # Dynamo skips _call_impl: the frame is forward's
        elif isinstance(original, types.MethodType):
            fn, lead = original.__func__, original.__self__
        else:
            fn, lead = original, None
    if ctx is None:
        raise TypeError(f"{type(compiled).__name__} is not what torch.compile or guardpolicy.compile returned")
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"the first frame of this {type(compiled).__name__} is a {type(fn).__name__}, "
                        "not a Python function: there are no frame locals to check guards on")
    binder = _BINDERS.get(fn)
    if binder is None or binder.__defaults__ is not fn.__defaults__:
        binder = _BINDERS[fn] = frame_locals_binder(fn)
    return TopFrame(fn, lead, ctx, stats, binder)


def _stats_of(compiled: Any) -> CompileStats | None:
    try:
        return stats(compiled)
    except TypeError:  # a plain torch.compile result
        return None


def _module_frame(wrapper: Any) -> tuple[Any, Any]:
    """The function whose frame Dynamo compiles for the ``OptimizedModule`` ``wrapper``, and
    the argument it takes first (as direct dispatch finds it)."""
    forward = wrapper.forward  # torch's compile_wrapper, or verify's per-call path around it
    inner = getattr(getattr(forward, "inner", forward), "__wrapped__", None)
    if isinstance(inner, types.FunctionType):  # external_utils.wrap_inline's function
        return inner, None
    return _forward_of(wrapper._orig_mod)


def _forward_of(mod: Any) -> tuple[Any, Any]:
    """The function of ``mod``'s ``forward`` and the module it takes first (its frame is what
    Dynamo compiles: ``Module._call_impl`` runs the hooks outside Dynamo, then calls it)."""
    forward = mod.forward
    if isinstance(forward, types.MethodType) and forward.__self__ is mod:
        return forward.__func__, mod
    return forward, None


def _original(compiled: Any) -> Any:
    """The callable torch compiled, behind guardpolicy's wrappers (verify's path, direct
    dispatch) and torch's ``compile_wrapper``."""
    seen = 0
    while seen < 8:
        seen += 1
        found = getattr(compiled, "_torchdynamo_orig_callable", None)
        if found is not None and found is not compiled:
            return found
        wrapped = getattr(compiled, "__wrapped__", None)
        if wrapped is None or wrapped is compiled:
            return compiled
        compiled = wrapped
    return compiled


def _context(compiled: Any, depth: int = 0) -> Any:
    """The ``OptimizeContext`` behind a compiled function: in its closure, or behind
    guardpolicy's wrappers (``__wrapped__``, verify's ``_guardpolicy_path``, the closure of
    direct dispatch's function); None when there is none."""
    from .. import torch_internals as _tp

    if compiled is None or depth > 3:
        return None
    try:
        return _tp.dynamo_context(compiled)
    except (RuntimeError, TypeError):
        pass
    candidates = [getattr(compiled, "__wrapped__", None), getattr(getattr(compiled, "_guardpolicy_path", None),
                                                                   "inner", None)]
    for cell in getattr(compiled, "__closure__", None) or ():
        try:
            candidates.append(cell.cell_contents)
        except ValueError:
            continue
    for candidate in candidates:
        if callable(candidate) and candidate is not compiled:
            found = _context(candidate, depth + 1)
            if found is not None:
                return found
    return None
