"""What the watched sources of one frame read (guardpolicy.runtime.watch): a ``Reads``, filled
by the walk of ``watch.sources.read`` through ``watch.record``, from which ``watch.GroupPlan``
builds the ``_core.WatchState`` the gate checks on every call, and its signature."""

from __future__ import annotations

import builtins
import dis
import functools
import types
import weakref
from typing import Any

from ..._core import watch_versions
from .kinds import CannotWatch
from .roots import IMMUTABLE

_MISSING = object()


class Reads:
    """What the watched sources of one frame read from one set of roots: ``watched`` (dicts and
    classes, by id), ``roots`` (``(local name, path)`` -> the object found there: the frame's
    module, a module or an object passed in ``*args``/``**kwargs``; held weakly once a state is
    made of it), ``keyed`` (globals read by name: ``(dict, name, value)``, and builtins the
    traced code reads, which a new global of that name would shadow: ``(globals, name,
    WATCH_ABSENT)``), ``hooks`` (the hook dicts of the modules the frame calls, by id, and
    ``hook_paths``: where each was found), ``objects`` (objects whose class and ``__dict__``
    are compared on every call), ``functions`` (functions whose code, defaults and closure
    cells are compared on every call), ``lists`` (plain lists, whose items are compared by
    identity on every call: no event tells of ``append`` or ``l[0] = x``) and ``tensors`` (the
    parameters, and with free tensors every installed tensor, whose ``TENSOR_MATCH`` is
    watched: their metadata is checked on every call). ``traced``: the code objects Dynamo
    traced for the frame (``OutputGraph.traced_code``): a function is watched when it runs one.
    ``free_tensors``: the frame was compiled with ``install_free_tensors``, so its code holds
    the tensors Dynamo installs (``torch_internals.installed_free``: parameters, buffers, a
    module's other tensors, a global's, a closure cell's) themselves: each is watched as a
    parameter is, and the signature holds each one's identity (a tensor replaced, even by an
    equal one, fails)."""

    def __init__(self, traced: frozenset = frozenset(), free_tensors: bool = False, code: Any = None) -> None:
        self.traced = traced
        self.free_tensors = free_tensors
        self.code = code  # the compiled frame's code: a root module's own hooks run inside it unless it is its forward
        self.watched: dict[int, Any] = {}
        self.roots: dict[tuple[str, tuple], Any] = {}
        self.keyed: dict[tuple[int, str], tuple[dict, str, Any]] = {}
        self.hooks: dict[int, dict] = {}
        self.hook_paths: list[tuple[tuple, str, str, dict]] = []  # (root key, module path, hook dict name, it)
        self.objects: dict[int, tuple] = {}  # (object, its class, its __dict__) as read
        self.functions: dict[int, tuple] = {}  # (function, __code__, __defaults__, __kwdefaults__, cells) as read
        self.lists: dict[int, list] = {}
        self.ordered: dict[int, dict] = {}  # OrderedDicts read, whose iteration order is compared on every call
        self.classes: dict[int, type] = {}  # heap classes read, whose metaclass and __mro__ are compared on every call
        self.tensors: dict[int, Any] = {}
        self.reached: dict[tuple[int, Any], tuple[dict, Any, Any]] = {}  # (dict, key, object read there)
        self.builtins: dict[tuple[int, str], dict] = {}  # (id(globals), a builtin's name) -> the globals
        self.present: dict[tuple[int, str], tuple] = {}  # (object, weakly; an attribute a HASATTR asks it for)
        self.dicts = 0  # the dicts and classes watched, once settled (settle)
        self._signed: tuple | None = None  # (signature key, signature) of the last signature()
        self._read_dicts: tuple | None = None  # (sizes, held dicts and classes, functions) of _signature_key

    def watch(self, obj: Any) -> None:
        self.watched.setdefault(id(obj), obj)

    def reach(self, parent: Any, node: Any, value: Any, S: Any) -> None:  # noqa: N803
        """Records that ``node`` read ``value`` out of ``parent``'s dict (an item of a dict,
        an attribute in an instance dict): another object there later (a submodule replaced
        by one of the same class, a tensor by one of its shape) makes the state be built anew.
        Raises ``CannotWatch`` for an item of a dict that does not hold it at the key read
        (a dict subclass's ``__getitem__`` computing it)."""
        if isinstance(node, attribute_sources(S)):
            self.held(getattr(parent, "__dict__", None), node.member, value)
        elif isinstance(node, getattr(S, "ConstDictKeySource", ())):
            return  # a key of a watched dict: another key there changes the dict
        elif not self.held(parent, _key(parent, getattr(node, "index", None), S), value) and isinstance(parent, dict):
            raise CannotWatch(f"an item of a dict read at a key it cannot hold ({type(value).__name__})")

    def held(self, container: Any, key: Any, value: Any) -> bool:
        """Records that ``value`` was read at ``container[key]`` (a dict; a module's globals
        for a global), as ``reach`` does; False where ``value`` needs holding (not a constant,
        nor a class) and ``container`` does not hold it at ``key``."""
        if isinstance(value, IMMUTABLE) and not _holds_tensor(value) or isinstance(value, type):
            return True
        try:
            found = isinstance(container, dict) and dict.get(container, key, _MISSING) is value
        except TypeError:  # an unhashable key
            found = False
        if found:
            self.reached[(id(container), key)] = (container, key, value)
        return found

    def watch_hooks(self, hooks: dict, where: tuple = (("", ()), "", "")) -> None:
        """A hook dict (``where``: its root's key, its module's path, its name), and each hook
        in it held where it was read: a hook replaced by another (of its class, so the same by
        the signature's ``_hook_token``) makes the state be built anew, whose reads then hold
        the new hook's installed tensors."""
        self.watch(hooks)
        if id(hooks) not in self.hooks:
            self.hooks[id(hooks)] = hooks
            self.hook_paths.append((*where, hooks))
        for key, hook in hooks.items():
            self.held(hooks, key, hook)

    def watch_function(self, fn: Any, attributes: bool = False) -> None:
        """A function the traced code runs (or a guard reads): its ``__code__``,
        ``__defaults__``, ``__kwdefaults__`` (and its contents) and closure cells, and the
        builtins its code reads, which a new global would shadow; ``attributes``: its
        ``__dict__`` too (a guard reads the function itself, and may read an attribute)."""
        if attributes:
            self.watch(fn.__dict__)
        if id(fn) in self.functions:
            return
        cells = tuple(_cell_contents(c) for c in fn.__closure__ or ())
        self.functions[id(fn)] = (fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, cells)
        if isinstance(fn.__kwdefaults__, dict):
            self.watch(fn.__kwdefaults__)
        self.watch_builtins(fn.__code__, fn.__globals__)

    def watch_traced_globals(self, globals_: dict) -> None:
        """The functions bound in ``globals_`` whose code Dynamo traced (a helper the forward
        calls, guarded or not by this torch release), each by name too (rebinding it is seen)."""
        if not self.traced:
            return
        for name, value in list(globals_.items()):
            if isinstance(value, types.FunctionType) and value.__code__ in self.traced:
                self.watch_function(value)
                self.watch_global(globals_, name)

    def watch_global(self, globals_: dict, name: str) -> None:
        """A module global read by name: a library module's globals dict is watched whole (it
        does not change while the model runs: one epoch compare, or one version load on 3.11);
        a script's (``__main__``, whose top-level loop writes its globals all the time) is read at
        ``name`` on every call, its value or its absence compared."""
        from ..._core import WATCH_ABSENT

        if globals_.get("__name__") != "__main__":
            self.watch(globals_)
        else:
            self.keyed.setdefault((id(globals_), name), (globals_, name, globals_.get(name, WATCH_ABSENT)))

    def watch_builtins(self, code: Any, globals_: dict) -> None:
        """Each builtin ``code`` reads as a global must stay missing from ``globals_``."""
        for name in _builtins_read(code):
            self.builtins.setdefault((id(globals_), name), globals_)
            self.watch_global(globals_, name)

    def signature(self) -> tuple:
        """What the compiled code inlined without a guard of its own (torch guards some of it
        in some releases only): the hooks of the modules it calls (where each sits under its
        root, and the identity of each hook), the contents of the classes read, the state of
        each traced function (code, defaults, keyword defaults, closure cells), whether each
        builtin its code reads is shadowed by a global, which of the attributes a ``HASATTR``
        asks for their objects have now (``has``), and with free tensors each tensor's
        identity. Two reads with equal signatures run the same code.

        Computed again only when a dict it reads changed (the hook dicts, the classes', the
        functions' keyword defaults, the globals a builtin is looked up in: ``_signature_key``);
        what else it reads (a function's code, defaults or cells, an installed tensor) is
        compared by the state on every call, which is built anew with new reads when one moves."""
        key = self._signature_key()
        if key is not None and self._signed is not None and self._signed[0] == key:
            signed = self._signed[1]
        else:
            signed = self._compute_signature()
            self._signed = (key, signed) if key is not None else None
        *inlined, tensors = signed
        return (*inlined, self.has(), tensors)

    def has(self) -> tuple:
        """The attributes a ``HASATTR`` asks for (``present``) that their objects have now,
        asked anew (no dict version tells of an ``nn.Module``'s ``_buffers`` gaining one)."""
        return tuple(sorted(name for held, name in self.present.values()
                            if (obj := deref(held)) is not None and hasattr(obj, name)))

    def _signature_key(self) -> tuple | None:
        """The versions of the dicts the signature reads, or None where versions are not kept.
        The hook dicts, classes and globals are the objects the walk read (gathered once, again
        if the walk added some); the functions' keyword defaults are read from each function."""
        size = (len(self.hook_paths), len(self.watched), len(self.functions), len(self.builtins))
        if self._read_dicts is None or self._read_dicts[0] != size:
            held = (*(d for *_, d in self.hook_paths), *(c for c in self.watched.values() if isinstance(c, type)),
                    *{id(g): g for g in self.builtins.values()}.values())
            # a function whose __kwdefaults__ is None now and a dict later is stale (its row compares them)
            functions = tuple(fn for fn, *_ in self.functions.values() if fn.__kwdefaults__ is not None)
            self._read_dicts = (size, held, functions)
        _, held, functions = self._read_dicts
        kwdefaults = tuple(fn.__kwdefaults__ for fn in functions if isinstance(fn.__kwdefaults__, dict))
        versions = watch_versions(held + kwdefaults)
        return None if versions is None else (tuple(map(id, kwdefaults)), versions)

    def _compute_signature(self) -> tuple:
        hooks = tuple(sorted((key[0], key[1], path, name, tuple(map(_hook_token, d.values())))
                             for key, path, name, d in self.hook_paths))
        classes = tuple((c.__qualname__, _class_contents(c), tuple(map(id, c.__mro__)))
                        for c in self.watched.values() if isinstance(c, type))
        functions = tuple((fn.__qualname__, id(fn.__code__), _token(fn.__defaults__),
                           _token(tuple(sorted((fn.__kwdefaults__ or {}).items()))),
                           tuple(_token(_cell_contents(c)) for c in fn.__closure__ or ()))
                          for fn, *_ in self.functions.values())
        shadowed = tuple(sorted(name for (_, name), g in self.builtins.items() if name in g))
        tensors = tuple(self.tensors) if self.free_tensors else ()
        return hooks, classes, functions, shadowed, tensors

    def weaken_roots(self, on_death: Any) -> None:
        """Holds the roots weakly (``on_death`` called when one dies): a cache entry must not
        keep a model or a request's cache alive."""
        self.roots = {key: weakly(deref(obj), on_death) for key, obj in self.roots.items()}

    def settle(self) -> None:
        """Lets go of what only ``state_rows`` reads, once its state is built (the state keeps
        these reads, and must not hold a root alive: a root's own ``__dict__`` holds the bound
        methods kept in it, ``self.act = self._double``). Kept: what the signature and a
        recheck read (the roots, weakly; the classes, hook dicts, functions, builtins and
        tensors) and how many dicts and classes were watched (``dicts``)."""
        self.dicts = len(self.watched)
        self.watched = {k: c for k, c in self.watched.items() if isinstance(c, type)}
        self.reached, self.objects, self.lists, self.ordered, self.keyed = {}, {}, {}, {}, {}
        self._read_dicts = None

    def state_rows(self) -> dict[str, tuple]:
        """The rows of a ``_core.WatchState`` of these reads, by the keyword it takes each by
        (their meaning: bindings/runtime/watch/watch_state.h, the one place they are described):
        the roots (``(local name, path, object or weak reference, class, __dict__)``), the dicts
        and classes watched, the objects and classes compared on every call, the functions, the
        keyed globals, the orders of the OrderedDicts of two keys or more (hook dicts among
        them), the plain lists' items, where each object read was held, the tensors."""
        orders = {id(d): d for d in (*self.hooks.values(), *self.ordered.values()) if len(d) > 1}
        return {
            "roots": tuple((name, path, held, type(deref(held)), own_dict_of(deref(held)))
                           for (name, path), held in self.roots.items()),
            "dicts": tuple(self.watched.values()),
            "objects": (*self.objects.values(), *((c, type(c), c.__mro__) for c in self.classes.values())),
            "functions": tuple(self.functions.values()),
            "keyed": tuple(self.keyed.values()),
            "orders": tuple((d, tuple(d)) for d in orders.values()),
            "lists": tuple((lst, tuple(lst)) for lst in self.lists.values()),
            "held": tuple(self.reached.values()),
            "tensors": tuple(self.tensors.values()),
        }


#: Per class, its dict's version and its contents then (``_class_contents``): a recheck reads
#: nn.Module's thousand-entry class dict only when that dict changed.
_CONTENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _class_contents(cls: type) -> tuple:
    """``(name, id(value))`` of each entry of ``cls``'s own dict, recomputed only when the
    dict's version moved (``_core.watch_version``; every time where there is none)."""
    from ..._core import watch_version

    version = watch_version(cls)
    known = _CONTENTS.get(cls) if version is not None else None
    if known is not None and known[0] == version:
        return known[1]
    contents = tuple((k, id(v)) for k, v in vars(cls).items())
    if version is not None:
        try:
            _CONTENTS[cls] = (version, contents)
        except TypeError:  # a class that takes no weak reference: read each time
            pass
    return contents


def signature_change(compiled: tuple, now: tuple) -> str:
    """What differs between the compile's signature and ``now`` (``Reads.signature``), in words:
    an attribute a ``hasattr`` reads, a hook (which hook dict of which module), a class or a
    function (its name), a builtin shadowed by a global, or an installed tensor."""
    hooks, classes, functions, shadowed, has, tensors = (set(a) ^ set(b) for a, b in zip(compiled, now))
    if has:
        return f"an attribute a hasattr reads was added or removed ({min(has)})"
    if hooks:
        root, _, path, name, _ = min(hooks, key=repr)
        return f"a hook changed ({name} of {path or root or 'a global'})"
    if classes or functions:
        return f"{'a class' if classes else 'a function'} changed ({min(classes or functions, key=repr)[0]})"
    if shadowed:
        return f"a global shadows a builtin ({min(shadowed)})"
    return "an installed tensor was replaced" if tensors else "the signature changed"


def _key(container: Any, index: Any, S: Any) -> Any:  # noqa: N803 - Dynamo's source classes
    """The key an item source's ``index`` reads ``container`` at: itself, or for a key Dynamo
    reads by its position (``ConstDictKeySource``: an enum member, a class, a dict subclass's
    key) the key at that position of ``dict.keys(container)`` (whose order torch guards)."""
    if not isinstance(index, getattr(S, "ConstDictKeySource", ())) or not isinstance(container, dict):
        return index
    keys = list(dict.keys(container))
    return keys[index.index] if isinstance(index.index, int) and -len(keys) <= index.index < len(keys) else _MISSING


def _holds_tensor(value: Any) -> bool:
    """Whether ``value`` is a tuple or frozenset with a tensor in it (at any depth): held where
    it was read, by identity, as a tensor is (a new tuple there holds other tensors), where a
    tuple of constants is compared by value."""
    import torch

    return isinstance(value, (tuple, frozenset)) and any(
        isinstance(item, torch.Tensor) or _holds_tensor(item) for item in value)


def _hook_token(hook: Any) -> Any:
    """What a signature compares for a hook in a hook dict: what its code is, not which object
    it is. torch guards a hook it inlines part by part, through the hook dict's source (captured
    with ``TORCH_LOGS=guards``): a callable object's type, its ``__dict__`` and each attribute
    its code reads; a function's ``__code__`` and each closure cell read; a partial's type, its
    function's code, its args' and keywords' lengths and each value read. The recheck
    evaluates those guards (watched, or kept), so a hook object made per block (one
    ``prune`` hook or ``lambda`` per layer of a model compiled block by block) or per call
    (PEFT's ``adapter_names`` partials) is no recompile here, as under ``torch.compile``.
    Compared: a function's code; a bound method's function and object (alone, or as a
    partial's function); a partial's function; any other callable's class."""
    fn = hook.func if type(hook) is functools.partial else hook
    if isinstance(fn, types.MethodType):
        token = ("method", id(fn.__func__), id(fn.__self__))
    elif isinstance(fn, types.FunctionType):
        token = ("function", id(fn.__code__))
    else:
        token = ("object", id(type(fn)))
    return ("partial", *token) if fn is not hook else token


def _token(value: Any) -> Any:
    """What a signature compares for ``value``: the value itself when it is a constant (a
    number, a string, None, a tuple of those: compared by value, and never a reused address),
    else its identity."""
    if isinstance(value, (int, float, complex, str, bytes, bool, type(None))):
        return (type(value), value)
    if isinstance(value, tuple):
        return tuple(_token(v) for v in value)
    return id(value)


def own_dict_of(obj: Any) -> dict | None:
    """``obj.__dict__`` when it is a dict, else None."""
    d = getattr(obj, "__dict__", None)
    return d if isinstance(d, dict) else None


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell: the gate reads it as None
        return None


@functools.lru_cache(maxsize=4096)
def _builtins_read(code: Any) -> tuple[str, ...]:
    """The builtins ``code`` (and the code nested in it) reads by ``LOAD_GLOBAL``."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
    return tuple(sorted(n for n in names if isinstance(n, str) and hasattr(builtins, n)))


def deref(obj: Any) -> Any:
    """``obj``, or what it refers to when it is a weak reference (None once dead)."""
    return obj() if isinstance(obj, weakref.ref) else obj


def weakly(obj: Any, on_death: Any) -> Any:
    try:
        return weakref.ref(obj, on_death)
    except TypeError:  # no weak reference to it: held as it is
        return obj


@functools.lru_cache(maxsize=None)
def attribute_sources(S: Any) -> tuple:  # noqa: N803 - Dynamo's source classes
    """The sources that read an attribute: ``AttrSource`` (``obj.name``) and, where this torch
    has it, ``GenericAttrSource`` (``object.__getattribute__(obj, 'name')``): a property or a
    slot behind either is computed, not read from a dict."""
    from .. import torch_internals

    return (S.AttrSource, *torch_internals.generic_attr_sources())
