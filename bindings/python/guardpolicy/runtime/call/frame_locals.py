"""The locals a frame of a Python function starts with, bound by CPython itself: verify's
sampled check and direct dispatch's every call evaluate torch's guard managers on them."""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable


def frame_locals_binder(fn: types.FunctionType) -> Callable[..., dict]:
    """A function with ``fn``'s signature (parameters, defaults, ``*args``, ``**kwargs``)
    that returns the locals a frame of ``fn`` starts with, by name: its arguments, bound by
    CPython exactly as for a call of ``fn`` (``inspect.signature(fn, follow_wrapped=False)``),
    and its free variables, read from ``fn``'s own closure cells (an empty cell is left out:
    the frame has no value for it either)."""
    code = fn.__code__
    names = code.co_varnames
    positional, kwonly = code.co_argcount, code.co_kwonlyargcount
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    params = []
    for i in range(positional):
        params.append(names[i] + ("=_" if i >= positional - len(defaults) else ""))
        if code.co_posonlyargcount and i == code.co_posonlyargcount - 1:
            params.append("/")
    index = positional + kwonly
    if code.co_flags & inspect.CO_VARARGS:
        params.append("*" + names[index])
        index += 1
    elif kwonly:
        params.append("*")
    params += [n + ("=_" if n in kwdefaults else "") for n in names[positional:positional + kwonly]]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append("**" + names[index])
        index += 1
    free = code.co_freevars
    args = ", ".join(f"{n!r}: {n}" for n in names[:index])
    every = ", ".join(f"{n!r}: {n}" for n in names[:index] + free)
    # The binder reads the free variables as its own: compiled inside a function that has
    # them as locals, then given fn's cells. An empty cell raises NameError: the slow path.
    source = (f"def _outer({', '.join(free)}):\n"
              f"    def frame_locals({', '.join(params)}):\n"
              f"        try:\n"
              f"            return {{{every}}}\n"
              f"        except NameError:\n"
              f"            return _guardpolicy_filled({{{args}}})\n"
              f"    return frame_locals\n")
    cells = dict(zip(free, fn.__closure__ or ()))

    def filled(f_locals: dict) -> dict:
        for name, cell in cells.items():
            try:
                f_locals[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
        return f_locals

    namespace: dict[str, Any] = {"_": None, "_guardpolicy_filled": filled}
    exec(source, namespace)  # noqa: S102
    inner = next(c for c in namespace["_outer"].__code__.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == "frame_locals")
    binder = types.FunctionType(inner, namespace, "frame_locals", fn.__defaults__,
                                tuple(cells[n] for n in inner.co_freevars) or None)
    binder.__kwdefaults__ = fn.__kwdefaults__
    return binder
