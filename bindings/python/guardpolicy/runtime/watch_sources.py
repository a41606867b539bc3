"""What a watched guard's source reads (guardpolicy.runtime.watch): its chain walked from its
root with torch's own ``Source.get_value`` (``torch_internals.dynamo_sources``), each dict
read on the way recorded in a ``Reads``, or ``CannotWatch`` where a read is not of a dict."""

from __future__ import annotations

import builtins
import dis
import functools
import inspect
import types
import weakref
from typing import Any

from .watch_own_dicts import own_dict
from .watch_roots import IMMUTABLE, UNWATCHABLE, chain_of, is_module, is_object, root_object

#: nn.Module's per-instance hook dicts that change what a call runs.
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_MISSING = object()
#: A watched function's attributes that the gate compares on every call (watch_state.h).
_FUNCTION_ATTRIBUTES = ("__code__", "__defaults__", "__kwdefaults__", "__closure__")


class CannotWatch(Exception):
    """A watched guard torch must check on every call; the message says why."""


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

    def __init__(self, traced: frozenset = frozenset(), free_tensors: bool = False) -> None:
        self.traced = traced
        self.free_tensors = free_tensors
        self.watched: dict[int, Any] = {}
        self.roots: dict[tuple[str, tuple], Any] = {}
        self.keyed: dict[tuple[int, str], tuple[dict, str, Any]] = {}
        self.hooks: dict[int, dict] = {}
        self.hook_paths: list[tuple[tuple, str, str, dict]] = []  # (root key, module path, hook dict name, it)
        self.objects: dict[int, tuple] = {}  # (object, its class, its __dict__) as read
        self.functions: dict[int, tuple] = {}  # (function, __code__, __defaults__, __kwdefaults__, cells) as read
        self.lists: dict[int, list] = {}
        self.tensors: dict[int, Any] = {}
        self.reached: dict[tuple[int, Any], tuple[dict, Any, Any]] = {}  # (dict, key, object read there)
        self.builtins: dict[tuple[int, str], dict] = {}  # (id(globals), a builtin's name) -> the globals

    def watch(self, obj: Any) -> None:
        self.watched.setdefault(id(obj), obj)

    def reach(self, parent: Any, node: Any, value: Any, S: Any) -> None:  # noqa: N803
        """Records that ``node`` read ``value`` out of ``parent``'s dict (an item of a dict,
        an attribute in an instance dict): another object there later (a submodule replaced
        by one of the same class) makes the state be built anew."""
        if isinstance(node, attribute_sources(S)):
            self.held(getattr(parent, "__dict__", None), node.member, value)
        else:
            self.held(parent, getattr(node, "index", None), value)

    def held(self, container: Any, key: Any, value: Any) -> None:
        """Records that ``value`` was read at ``container[key]`` (a dict; a module's globals
        for a global), as ``reach`` does."""
        if isinstance(value, IMMUTABLE) or isinstance(value, type):
            return
        if isinstance(container, dict) and isinstance(key, (str, int)) and container.get(key, _MISSING) is value:
            self.reached[(id(container), key)] = (container, key, value)

    def moved(self) -> bool:
        """Whether an object recorded by ``reach`` is no longer where it was read."""
        return any(container.get(key, _MISSING) is not value for container, key, value in self.reached.values())

    def watch_hooks(self, hooks: dict, where: tuple = (("", ()), "", "")) -> None:
        self.watch(hooks)
        if id(hooks) not in self.hooks:
            self.hooks[id(hooks)] = hooks
            self.hook_paths.append((*where, hooks))

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
        from .._core import WATCH_ABSENT

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
        builtin its code reads is shadowed by a global, and with free tensors each tensor's
        identity. Two reads with equal signatures run the same code."""
        hooks = tuple(sorted((key[0], key[1], path, name, tuple(id(v) for v in d.values()))
                             for key, path, name, d in self.hook_paths))
        classes = tuple((c.__qualname__, tuple((k, id(v)) for k, v in vars(c).items()))
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

    def root_rows(self) -> tuple:
        """``(local name, path, object or weak reference, class, __dict__)`` per root, as
        ``_core.WatchState`` takes them."""
        return tuple((name, path, held, type(deref(held)), own_dict_of(deref(held)))
                     for (name, path), held in self.roots.items())


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


class Walk:
    """One walk of a frame's watched sources: torch's ``Source.get_value`` cache, shared by
    the sources (their chains share prefixes: ``L['self']._modules['layers']``), and the values
    already recorded. Dropped after the walk: it holds what it read strongly, the roots too."""

    def __init__(self) -> None:
        self.cache: dict = {}
        self.seen: set = set()  # (id, hooks, root) of each value recorded; the cache keeps it alive
        self.done: set = set()  # the sources walked (a prefix of a later one: nothing to record again)


def read(source: Any, scope: dict, closure: dict, out: Reads, tensor_match: bool = False,
         walk: Walk | None = None) -> tuple | None:
    """Records in ``out`` every dict ``source`` reads, from its root to its value, and returns
    its root's key in ``out.roots`` (``(local name, path)``), or None for a global; raises
    ``CannotWatch`` where one read is not of a dict. ``scope``: ``{"L": frame locals, "G":
    globals}`` as torch's guard code reads them; ``closure``: torch's guard closure names.
    ``tensor_match``: the guard is a ``TENSOR_MATCH``, whose value may be a parameter or an
    installed free tensor (its metadata then checked on every call: ``out.tensors``). ``walk``: the walk this read is one
    of (the sources of one frame read from one scope), or None for a walk of its own."""
    from . import torch_internals

    S = torch_internals.dynamo_sources()  # noqa: N806 - Dynamo's source classes
    walk = walk if walk is not None else Walk()
    chain = chain_of(source)
    cache = walk.cache
    root, key = chain[-1], None
    if isinstance(root, S.LocalSource):
        key = _root(chain, scope, closure, cache, out, S)
    elif isinstance(root, S.GlobalSource):
        out.watch_global(scope["G"], root.global_name)
    else:
        raise CannotWatch(f"its source starts at a {type(root).__name__}")
    at_root = chain[-1].value if isinstance(root, S.LocalSource) else _MISSING  # also behind a wrapping source
    parent = None
    for node in reversed(chain):
        value = node.get_value(scope, closure, cache)
        if node in walk.done and node is not source:  # a prefix another source walked
            parent = value
            continue
        if parent is not None and isinstance(node, attribute_sources(S)):
            _check_attribute(parent, node.member, out)
        if parent is not None:
            out.reach(parent, node, value, S)
        elif isinstance(node, S.GlobalSource):  # a global replaced makes the state be built anew too
            out.held(scope["G"], node.global_name, value)
        if tensor_match and node is source and _held_tensor(value, node, out):
            out.tensors.setdefault(id(value), value)
            return key
        # a local module's own hooks run outside its frame: those of what the frame calls are watched
        seen = (id(value), value is not at_root, value is at_root)
        if seen not in walk.seen:  # recorded once it was watchable: another source raises alike
            _watch_value(value, out, hooks=value is not at_root, root=value is at_root)
            walk.seen.add(seen)
        walk.done.add(node)
        parent = value
    return key


@functools.lru_cache(maxsize=None)
def attribute_sources(S: Any) -> tuple:  # noqa: N803 - Dynamo's source classes
    """The sources that read an attribute: ``AttrSource`` (``obj.name``) and, where this torch
    has it, ``GenericAttrSource`` (``object.__getattribute__(obj, 'name')``): a property or a
    slot behind either is computed, not read from a dict."""
    from . import torch_internals

    return (S.AttrSource, *torch_internals.generic_attr_sources())


def _root(chain: list, scope: dict, closure: dict, cache: dict, out: Reads, S: Any) -> tuple:  # noqa: N803
    """The object a local source starts from, through the ``*args`` tuple and the ``**kwargs``
    dict a call passes anew (popped from ``chain``): recorded in ``out.roots`` by its local
    name and path (returned), which the gate checks by identity on every call."""
    key, value = root_object(chain, scope, closure, cache, S)
    chain.append(_Here(value))  # the root node of what is walked next
    if not is_object(value):
        raise CannotWatch(f"its source starts at the input L[{key[0]!r}], passed anew on every call")
    if key in out.roots:
        if out.roots[key] is not value:
            raise CannotWatch(f"L[{key[0]!r}] holds another object")
        return key
    out.roots[key] = value
    if is_module(value):  # the frame's module: the hooks of every module it calls
        for path, sub in value.named_modules(remove_duplicate=False):
            if path:
                watch_hooks_of(sub, out, (key, path))
    return key


class _Here:
    """A root already read: its value, as a chain node."""

    def __init__(self, value: Any):
        self.value = value

    def get_value(self, *_: Any) -> Any:
        return self.value


def _check_attribute(owner: Any, member: str, out: Reads) -> None:
    """Raises ``CannotWatch`` when ``owner.member`` is computed by a data descriptor (a
    property, a slot) rather than read from a dict, unless the gate compares it on every call:
    a watched function's code, defaults and closure, the contents of one of its cells, the
    class of a watched object or root."""
    instance_dict = getattr(owner, "__dict__", None)
    if isinstance(instance_dict, dict) and member in instance_dict:
        return
    if isinstance(owner, types.FunctionType) and member in _FUNCTION_ATTRIBUTES:
        return
    if member == "cell_contents" and isinstance(owner, types.CellType) and any(
            owner in (fn.__closure__ or ()) for fn, *_ in out.functions.values()):
        return
    if member == "__class__" and (id(owner) in out.objects or any(deref(r) is owner for r in out.roots.values())):
        return
    found = inspect.getattr_static(owner if isinstance(owner, type) else type(owner), member, None)
    if hasattr(type(found), "__set__") or hasattr(type(found), "__get__") and not inspect.isroutine(found):
        raise CannotWatch(f"`{member}` is computed by a {type(found).__name__}, not read from a dict")


def _watch_value(value: Any, out: Reads, hooks: bool, root: bool = False) -> None:
    """Records what ``value``, read by a watched source, is held in. ``root``: the value is a
    root, whose class and ``__dict__`` the gate compares with the root itself."""
    import torch

    if isinstance(value, torch.Tensor):
        raise CannotWatch("a tensor's metadata changes without any dict changing")
    if type(value) is list:  # its items, by identity, compared on every call
        out.lists.setdefault(id(value), value)
        return
    if isinstance(value, UNWATCHABLE):
        raise CannotWatch(f"a {type(value).__name__} is not a dict a watcher can see")
    if isinstance(value, dict):
        out.watch(value)
    elif isinstance(value, type):
        _watch_class(value, out)
    elif isinstance(value, types.ModuleType):
        out.watch(vars(value))
    elif isinstance(value, types.FunctionType):
        out.watch_function(value, attributes=True)
    elif isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        out.watch_function(value.__func__, attributes=True)
    elif not isinstance(value, IMMUTABLE):
        instance_dict = getattr(value, "__dict__", None)
        if isinstance(instance_dict, dict):
            own = own_dict(value, instance_dict)
            if own is None:
                raise CannotWatch("on Python 3.13 its attributes are held inline, where no dict watcher sees them")
            out.watch(own)
            if not root:  # `obj.__class__ = ...`, `obj.__dict__ = {...}` change no dict: compared per call
                out.objects.setdefault(id(value), (value, type(value), own))
        _watch_class(type(value), out)
        if hooks and is_module(value):
            watch_hooks_of(value, out)


def _watch_class(cls: type, out: Reads) -> None:
    """A class, its bases and its metaclass's (an attribute read through the class may come
    from either), and the functions in them that the traced code runs."""
    for klass in (*cls.__mro__, *type(cls).__mro__):
        if klass is object or klass is type or id(klass) in out.watched:
            continue
        out.watch(klass)
        for attr in vars(klass).values():
            fn = getattr(attr, "__func__", attr)  # staticmethod, classmethod
            if isinstance(fn, types.FunctionType) and fn.__code__ in out.traced:
                out.watch_function(fn)


def _held_tensor(value: Any, node: Any, out: Reads) -> bool:
    """Whether ``value``, read by a ``TENSOR_MATCH``'s source ``node``, is a tensor the gate
    checks the metadata of on every call (``out.tensors``): a parameter, or with free tensors
    any tensor Dynamo installs (``torch_internals.installed_free``), whose identity the
    signature holds too."""
    import torch

    from . import torch_internals

    if _is_parameter(value):
        return True
    return out.free_tensors and isinstance(value, torch.Tensor) and (
        _is_buffer(node) or torch_internals.installed_free(node))


def _is_parameter(value: Any) -> bool:
    import torch

    return isinstance(value, torch.nn.Parameter)


def _is_buffer(node: Any) -> bool:
    """Whether ``node`` reads an item of a module's ``_buffers``."""
    return getattr(getattr(node, "base", None), "member", None) == "_buffers"


def watch_hooks_of(module: Any, out: Reads, where: tuple = (("", ()), "")) -> None:
    """The hook dicts of ``module`` (``where``: its root's key and its path under it), and the
    hooks in them that the traced code runs."""
    for name in HOOK_DICTS:
        hooks = vars(module).get(name)
        if isinstance(hooks, dict):
            out.watch_hooks(hooks, (*where, name))
            for hook in hooks.values():
                if isinstance(hook, types.FunctionType) and hook.__code__ in out.traced:
                    out.watch_function(hook)
