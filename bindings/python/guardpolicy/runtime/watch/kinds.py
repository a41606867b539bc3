"""The object kinds the watch gate provably sees every change of: ``KINDS``, one table, mirrored
in docs/design-notes/watch.md ("What may be watched"). A watched guard is watched only when
every value its source reads, from its root to its value, is of a kind in the table (``kind_of``)
and every step is an accessor the table allows on its parent's kind (``check_step``); any other
guard stays in torch's guard manager, checked on every call, with the reason
(``guardpolicy.stats(compiled).watches.unwatched``). The rule is an allowlist: a kind that is not
named here (a mapping proxy, a dict view, a subclass of a builtin type, a weak reference, an
object of a C type) is never watched blind.

``kind_of`` answers by the value's exact type, never ``isinstance``: a ``dict`` subclass's
instance attributes and ``__getitem__``, a ``float`` subclass's ``__dict__``, a ``NamedTuple``
subclass's fields are state no watcher sees."""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import types
from typing import Any, Callable


class CannotWatch(Exception):
    """A watched guard torch must check on every call; the message says why."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """One row of ``KINDS``: ``name`` (as the design note names it), ``test`` (whether a value is
    of the kind, by its exact type), ``seen_by`` (how the gate sees every change of such a value)
    and ``steps`` (the names of Dynamo's source classes that may read from such a value: an
    attribute, an item, ``type(x)``, ...)."""

    name: str
    test: Callable[[Any], bool]
    seen_by: str
    steps: frozenset[str]


#: Sources whose value is their base's own (``{0}``): allowed on every kind.
IDENTITY_STEPS = frozenset({"NNModuleSource", "UnspecializedNNModuleSource", "UnspecializedBuiltinNNModuleSource",
                            "FSDPNNModuleSource", "OptimizerSource"})
_ATTRIBUTE = frozenset({"AttrSource", "GenericAttrSource", "ParamBufferSource", "UnspecializedParamBufferSource"})
_ITEM = frozenset({"GetItemSource", "DictGetItemSource", "ConstDictKeySource"})
_TYPE = frozenset({"TypeSource"})

_CONSTANT_TYPES = frozenset({int, float, complex, str, bytes, bool, type(None), type(Ellipsis),
                             type(NotImplemented), range, slice, types.CodeType})
_BUILTIN_CALLABLES = frozenset({types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                                types.ClassMethodDescriptorType, types.MethodWrapperType})


@functools.lru_cache(maxsize=None)
def _torch_constants() -> frozenset:
    """torch's immutable value types (read once torch is imported)."""
    import torch

    return frozenset({torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size})


def _is_constant(value: Any) -> bool:
    return type(value) in _CONSTANT_TYPES or type(value) in _torch_constants()


def _is_plain_class(cls: type, base: type = object) -> bool:
    """Whether instances of ``cls`` hold their state in ``base``'s part (nothing for
    ``object``; a dict's items for ``dict``) and their ``__dict__`` alone: every class of its
    MRO but ``base``'s is a mutable heap type (a class statement; C extension types are static
    or immutable, pybind11's are larger) and its instances are the size of ``base``'s plus a
    class statement's own (``__slots__`` and other builtin bases, ``float``, ``tuple``, add
    C-level state that no dict watcher sees)."""
    if cls.__basicsize__ != _plain_size(base) or cls.__itemsize__ != base.__itemsize__:
        return False
    return all(k in base.__mro__ or k.__flags__ & (_HEAPTYPE | _IMMUTABLETYPE) == _HEAPTYPE for k in cls.__mro__)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE
_IMMUTABLETYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE (3.10+)


@functools.lru_cache(maxsize=None)
def _plain_size(base: type) -> int:
    """The size of an instance of ``class _(base): pass``: what a class statement with no
    ``__slots__`` gives (``base`` may hold its ``__dict__`` and weak references already)."""
    return type("_Plain", (base,), {}).__basicsize__


def _is_object(value: Any) -> bool:
    """An instance of a plain Python class, or of ``types.SimpleNamespace`` (whose state is its
    ``__dict__`` alone) or a plain subclass of it."""
    return isinstance(getattr(value, "__dict__", None), dict) and (
        _is_plain_class(type(value)) or _is_plain_class(type(value), types.SimpleNamespace)
        or type(value) is types.SimpleNamespace)


def _is_module(value: Any) -> bool:
    return type(value) is types.ModuleType or (isinstance(value, types.ModuleType) and all(
        k in (types.ModuleType, object) or k.__flags__ & (_HEAPTYPE | _IMMUTABLETYPE) == _HEAPTYPE
        for k in type(value).__mro__))


KINDS: tuple[Kind, ...] = (
    Kind("constant", _is_constant,
         "immutable (exact int, float, complex, str, bytes, bool, None, range, slice, code; torch.dtype, "
         "device, layout, memory_format, Size): replacing it changes the dict or list it is read from",
         _TYPE),
    Kind("tuple", lambda v: type(v) in (tuple, frozenset),
         "immutable; each item is of a kind in this table and watched as such", _ITEM | _TYPE),
    Kind("dict", lambda v: type(v) is dict,
         "a dict watcher (3.12+) and its ma_version_tag: every set, delete, clear or update", _ITEM | _TYPE),
    Kind("dict subclass", lambda v: isinstance(v, dict) and type(v) is not dict and _is_plain_class(type(v), dict),
         "a subclass of dict written in Python (a registry, a config): its items as a dict's, and "
         "its own __dict__ and class as an object's",
         _ITEM | _TYPE | _ATTRIBUTE | {"DictSubclassGetItemSource"}),
    Kind("OrderedDict subclass", lambda v: isinstance(v, collections.OrderedDict)
         and type(v) is not collections.OrderedDict and _is_plain_class(type(v), collections.OrderedDict),
         "a subclass of OrderedDict written in Python (diffusers' FrozenDict config): as an OrderedDict, "
         "and its own __dict__ and class as an object's",
         _ITEM | _TYPE | _ATTRIBUTE | {"DictSubclassGetItemSource", "ODictGetItemSource"}),
    Kind("OrderedDict", lambda v: type(v) is collections.OrderedDict,
         "as a dict, and its iteration order compared on every call (move_to_end changes no version)",
         _ITEM | _TYPE | {"ODictGetItemSource"}),
    Kind("list", lambda v: type(v) is list,
         "its items compared by identity on every call (no event tells of append or l[i] = x)",
         _ITEM | _TYPE | {"ListGetItemSource"}),
    Kind("object", _is_object,
         "an instance of a plain Python class (nn.Module, a config object, a dataclass) or of "
         "types.SimpleNamespace: its own "
         "__dict__ watched, its class and __dict__ compared on every call, its class's MRO dicts watched "
         "and its __mro__ compared on every call (so __getattr__, __getattribute__, __setattr__ too)",
         _ATTRIBUTE | _TYPE),
    Kind("enum member", lambda v: isinstance(v, enum.Enum) and isinstance(getattr(v, "__dict__", None), dict),
         "a singleton of its enum class whose mixed-in value (a str, an int) cannot change: its "
         "__dict__ watched and its class and __dict__ compared on every call, as an object's",
         _ATTRIBUTE | _TYPE),
    Kind("class", lambda v: isinstance(v, type),
         "its dict and those of its MRO and its metaclass's MRO watched; its metaclass and __mro__ "
         "compared on every call (Class.__bases__ = ... changes no dict)",
         _ATTRIBUTE | _TYPE | {"TypeMROSource", "TypeDictSource"}),
    Kind("module", _is_module,
         "a Python module (or a subclass written in Python, whose class is watched): its globals dict",
         _ATTRIBUTE | _TYPE),
    Kind("function", lambda v: type(v) is types.FunctionType,
         "its __code__, __defaults__, __kwdefaults__ and closure cells compared on every call, its "
         "__dict__ and __kwdefaults__ watched",
         _ATTRIBUTE | _TYPE | {"CodeSource", "ClosureSource", "DefaultsSource"}),
    Kind("method", lambda v: type(v) is types.MethodType and type(v.__func__) is types.FunctionType,
         "a bound method read afresh each time: its function watched as a function, its __self__ as its kind",
         _ATTRIBUTE | _TYPE),
    Kind("cell", lambda v: type(v) is types.CellType,
         "a closure cell of a watched function: its contents compared with the function's on every call",
         _TYPE | {"CellContentsSource", "AttrSource"}),
    Kind("builtin callable", lambda v: type(v) in _BUILTIN_CALLABLES,
         "a function or method of C code: nothing in it can change", _TYPE),
)

def kind_of(value: Any) -> Kind:
    """The row of ``KINDS`` ``value`` is of; raises ``CannotWatch`` naming its type when none."""
    for kind in KINDS:
        if kind.test(value):
            return kind
    raise CannotWatch(f"a `{type(value).__name__}` is not a kind the watch sees every change of "
                      "(docs/design-notes/watch.md)")


def check_step(node: Any, parent: Any) -> None:
    """Raises ``CannotWatch`` unless the source ``node`` reads from ``parent`` (a value already
    found of a kind) by an accessor the table allows on that kind: an item of a dict, list or
    tuple by a plain key, an attribute of an object, class, module or function, ``type(x)``, a
    source that is its base's own value."""
    step = type(node).__name__
    kind = kind_of(parent)
    if step in IDENTITY_STEPS:
        return
    if step not in kind.steps:
        raise CannotWatch(f"`{step}` on a {kind.name} is not a read the watch sees every change of")
    index = getattr(node, "index", None)
    if step in _ITEM and isinstance(index, slice):
        raise CannotWatch(f"a slice of a {kind.name}")
