"""What a value read by a watched source records in a ``Reads`` (guardpolicy.runtime.watch), by
its kind in the table of ``watch.kinds.KINDS``: a dict watched, a list's items, an object's own
``__dict__`` and class, a class's MRO and metaclass, a function's code and defaults, the hook
dicts of a module the frame calls. A value of no kind there raises ``CannotWatch``."""

from __future__ import annotations

import types
from typing import Any

from .kinds import CannotWatch, kind_of
from .own_dicts import own_dict
from .reads import Reads
from .roots import is_module

#: nn.Module's per-instance hook dicts that change what a call runs.
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class whose bases can be reassigned


def watch_value(value: Any, out: Reads, hooks: bool, root: bool = False) -> None:
    """Records what ``value``, read by a watched source, is held in, by its kind
    (``watch.kinds.KINDS``); raises ``CannotWatch`` for a value of no kind there. ``root``: the
    value is a root, whose class and ``__dict__`` the gate compares with the root itself."""
    import torch

    if isinstance(value, torch.Tensor):
        raise CannotWatch("a tensor's metadata changes without any dict changing")
    _RECORD[kind_of(value).name](value, out, hooks, root)


def _watch_tuple(value: Any, out: Reads, hooks: bool, root: bool) -> None:
    """Each item of a tuple or frozenset, by its kind (a list inside a tuple is a list), but a
    tensor: it is replaced only with the tuple, and its metadata is compared by the
    ``TENSOR_MATCH`` that reads it (``sources.read``: the gate's tensors, or torch's manager)."""
    import torch

    if len(value) > _MAX_TUPLE_ITEMS:
        raise CannotWatch(f"a {type(value).__name__} of {len(value)} items")
    for item in value:
        if not isinstance(item, torch.Tensor):
            watch_value(item, out, hooks=False)


def _watch_ordered(value: Any, out: Reads, hooks: bool, root: bool) -> None:
    out.watch(value)
    out.ordered.setdefault(id(value), value)


def _watch_object(value: Any, out: Reads, hooks: bool, root: bool) -> None:
    own = own_dict(value, value.__dict__)
    if own is None:
        raise CannotWatch("on Python 3.13 its attributes are held inline, where no dict watcher sees them")
    out.watch(own)
    if not root:  # `obj.__class__ = ...`, `obj.__dict__ = {...}` change no dict: compared per call
        out.objects.setdefault(id(value), (value, type(value), own))
    _watch_class(type(value), out)
    if hooks and is_module(value):
        watch_hooks_of(value, out)


def _watch_module(value: Any, out: Reads, hooks: bool, root: bool) -> None:
    """A module's globals dict; for an instance of a subclass written in Python (a lazy
    module, a config module), its class too (a ``__getattr__``, the methods it reads), and
    its class compared on every call (``module.__class__ = Other`` changes no dict). A plain
    ``types.ModuleType``'s class is not compared: ``torch.compile`` does not see one replaced
    either, and every ``torch``, ``math`` or library module read would pay a compare per call."""
    out.watch(vars(value))
    if type(value) is not types.ModuleType:
        _watch_class(type(value), out)
        out.objects.setdefault(id(value), (value, type(value), None))  # its __dict__ cannot be replaced


def _watch_method(value: Any, out: Reads, hooks: bool, root: bool) -> None:
    out.watch_function(value.__func__, attributes=True)
    kind_of(value.__self__)  # the object it is bound to is of a kind watched where it is read


def _nothing(*_: Any) -> None:
    """A value that cannot change (a constant, C code) or whose change is compared where it is
    read (a closure cell, by its function's row)."""


#: Items a watched tuple may hold (each is watched by its kind).
_MAX_TUPLE_ITEMS = 64

#: What recording a value of each kind of ``watch.kinds.KINDS`` (by name) does.
_RECORD = {
    "constant": _nothing,
    "tuple": _watch_tuple,
    "dict": lambda value, out, *_: out.watch(value),
    "OrderedDict": _watch_ordered,
    "list": lambda value, out, *_: out.lists.setdefault(id(value), value),
    "object": _watch_object,
    "dict subclass": lambda value, out, hooks, root: (out.watch(value), _watch_object(value, out, hooks, root)),
    "OrderedDict subclass": lambda value, out, hooks, root: (_watch_ordered(value, out, hooks, root),
                                                             _watch_object(value, out, hooks, root)),
    "enum member": _watch_object,
    "class": lambda value, out, *_: _watch_class(value, out),
    "module": _watch_module,
    "function": lambda value, out, *_: out.watch_function(value, attributes=True),
    "method": _watch_method,
    "cell": _nothing,
    "builtin callable": _nothing,
}


def _watch_class(cls: type, out: Reads) -> None:
    """A class, its bases and its metaclass's (an attribute read through the class may come
    from either), and the functions in them that the traced code runs."""
    for klass in (*cls.__mro__, *type(cls).__mro__):
        if klass is object or klass is type or id(klass) in out.watched:
            continue
        out.watch(klass)
        if klass.__flags__ & _HEAPTYPE:  # `Class.__bases__ = ...`, `Class.__class__ = ...` change no dict
            out.classes.setdefault(id(klass), klass)
        for attr in vars(klass).values():
            fn = getattr(attr, "__func__", attr)  # staticmethod, classmethod
            if isinstance(fn, types.FunctionType) and fn.__code__ in out.traced:
                out.watch_function(fn)


def watch_hooks_of(module: Any, out: Reads, where: tuple = (("", ()), "")) -> None:
    """The hook dicts of ``module`` (``where``: its root's key and its path under it), each
    held where it was found (a hook dict replaced whole, ``module._forward_hooks =
    OrderedDict()``, makes the state be built anew), and the hooks in them that the traced code
    runs."""
    own = own_dict(module, vars(module))  # on 3.13, the dict the walk watches, not the one it replaces
    own = own if own is not None else vars(module)
    for name in HOOK_DICTS:
        hooks = own.get(name)
        if isinstance(hooks, dict):
            out.watch_hooks(hooks, (*where, name))
            out.held(own, name, hooks)
            for hook in hooks.values():
                if isinstance(hook, types.FunctionType) and hook.__code__ in out.traced:
                    out.watch_function(hook)
