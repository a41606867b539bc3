"""What a watched guard's source reads (guardpolicy.runtime.watch): its chain walked from its
root with torch's own ``Source.get_value`` (``torch_internals.dynamo_sources``), each step
allowed by ``watch.kinds.check_step`` and each value recorded in a ``Reads`` by
``watch.record.watch_value``, or ``CannotWatch`` where one is not a kind the watch sees."""

from __future__ import annotations

import inspect
import types
from typing import Any

from .kinds import CannotWatch, check_step, kind_of
from .reads import Reads, attribute_sources, deref, weakly
from .record import watch_hooks_of, watch_value
from .roots import chain_of, is_module, is_object, root_object

_MISSING = object()
#: Kinds (watch.kinds.KINDS) whose ``__dict__`` is their own, watched, and compared by identity
#: on every call (a root's by its root row, any other's by its object row).
_OWN_DICT_KINDS = frozenset({"object", "dict subclass", "OrderedDict subclass", "enum member"})
#: A watched function's attributes that the gate compares on every call (watch_state.h).
_FUNCTION_ATTRIBUTES = ("__code__", "__defaults__", "__kwdefaults__", "__closure__")


class Walk:
    """One walk of a frame's watched sources: torch's ``Source.get_value`` cache, shared by
    the sources (their chains share prefixes: ``L['self']._modules['layers']``), and the values
    already recorded. Dropped after the walk: it holds what it read strongly, the roots too."""

    def __init__(self) -> None:
        self.cache: dict = {}
        self.seen: set = set()  # (id, hooks, root) of each value recorded; the cache keeps it alive
        self.done: set = set()  # the sources walked (a prefix of a later one: nothing to record again)


def read(source: Any, scope: dict, closure: dict, out: Reads, tensor_match: bool = False,
         walk: Walk | None = None, absent: bool = False) -> tuple | None:
    """Records in ``out`` every dict ``source`` reads, from its root to its value, and returns
    its root's key in ``out.roots`` (``(local name, path)``), or None for a global; raises
    ``CannotWatch`` where one read is not of a dict. ``scope``: ``{"L": frame locals, "G":
    globals}`` as torch's guard code reads them; ``closure``: torch's guard closure names.
    ``tensor_match``: the guard is a ``TENSOR_MATCH``, whose value may be a parameter or an
    installed free tensor (its metadata then checked on every call: ``out.tensors``). ``walk``: the walk this read is one
    of (the sources of one frame read from one scope), or None for a walk of its own. ``absent``: the guard is a
    ``HASATTR``, whose source may name an attribute its object lacks (torch 2.11 and 2.12 name
    ``L['self'].extra`` where later releases name ``L['self']``): whether the object has it is
    recorded (``Reads.present``), and an attribute it lacks ends the walk (``_watch_absent``)."""
    from .. import torch_internals

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
        presence = absent and node is source and parent is not None and isinstance(node, attribute_sources(S))
        if presence:  # a HASATTR's attribute: whether the object has it is asked again by each recheck
            out.present.setdefault((id(parent), node.member), (weakly(parent, None), node.member))
        try:
            value = node.get_value(scope, closure, cache)
        except AttributeError:
            if not presence:
                raise
            check_step(node, parent)
            _watch_absent(parent, node.member, out)
            return key
        if node in walk.done and node is not source:  # a prefix another source walked
            parent = value
            continue
        if parent is not None:
            check_step(node, parent)
        if parent is not None and isinstance(node, attribute_sources(S)):
            _check_attribute(parent, node.member, out)
        if parent is not None:
            out.reach(parent, node, value, S)
        elif isinstance(node, S.GlobalSource):  # a global replaced makes the state be built anew too
            out.held(scope["G"], node.global_name, value)
        if tensor_match and node is source and _held_tensor(value, node, out):
            out.tensors.setdefault(id(value), value)
            return key
        # a root module's own hooks are recorded with its root (_root), those of what the frame calls here
        seen = (id(value), value is not at_root, value is at_root)
        if seen not in walk.seen:  # recorded once it was watchable: another source raises alike
            watch_value(value, out, hooks=value is not at_root, root=value is at_root)
            walk.seen.add(seen)
        walk.done.add(node)
        parent = value
    return key


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
        own = _runs_own_hooks(value, out.code)
        for path, sub in value.named_modules(remove_duplicate=False):
            if path or own:
                watch_hooks_of(sub, out, (key, path))
    return key


def _runs_own_hooks(module: Any, code: Any) -> bool:
    """Whether the compiled frame runs ``module``'s own hooks: unless the frame is its
    ``forward`` (whose hooks run around the frame), it calls the module (a module passed in, a
    built-in module torch compiles through ``wrap_inline``, a block's ``_call_impl`` compiled
    in place), and its hooks run inside, inlined with no guard of their own."""
    forward = getattr(type(module), "forward", None)
    return getattr(forward, "__code__", None) is not code


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
    if isinstance(owner, types.MethodType) and member in ("__func__", "__self__"):
        return  # read-only: a bound method never changes
    if member == "__dict__" and kind_of(owner).name in _OWN_DICT_KINDS:
        return  # the object's own dict, watched; `obj.__dict__ = {...}` is compared on every call
    found = inspect.getattr_static(owner if isinstance(owner, type) else type(owner), member, _MISSING)
    if found is _MISSING:
        _through_getattr(owner, member, out)
    elif hasattr(type(found), "__set__") or hasattr(type(found), "__get__") and not inspect.isroutine(found):
        raise CannotWatch(f"`{member}` is computed by a {type(found).__name__}, not read from a dict")


def _watch_absent(owner: Any, member: str, out: Reads) -> None:
    """``owner.member`` read as absent (``hasattr(self, "extra")``, ``getattr(self, "extra",
    None)``): what could make it present is watched (``owner``'s own dict and class, recorded
    by the walk; a ``__getattr__``'s dicts, ``_through_getattr``), and each recheck asks again
    whether it is (``Reads.present``, in the signature): torch 2.11's ``not hasattr`` guard,
    alone under an ``nn.Module`` in a manager a filter built, passes once it is added."""
    if inspect.getattr_static(type(owner), "__getattr__", _MISSING) is not _MISSING:
        _through_getattr(owner, member, out)


def _through_getattr(owner: Any, member: str, out: Reads) -> None:
    """``owner.member``, found neither in its ``__dict__`` nor its class, came from its class's
    ``__getattr__``: ``nn.Module``'s reads the instance's ``_parameters``, ``_buffers`` and
    ``_modules``, which are watched; any other is code whose reads the watch cannot follow."""
    import torch

    if isinstance(owner, torch.nn.Module) and type(owner).__getattr__ is torch.nn.Module.__getattr__:
        for name in ("_parameters", "_buffers", "_modules"):
            held = vars(owner).get(name)
            if type(held) is dict:
                out.watch(held)
        return
    raise CannotWatch(f"`{member}` is found by `{type(owner).__qualname__}.__getattr__`, which the watch cannot follow")


def _held_tensor(value: Any, node: Any, out: Reads) -> bool:
    """Whether ``value``, read by a ``TENSOR_MATCH``'s source ``node``, is a tensor the gate
    checks the metadata of on every call (``out.tensors``): a parameter, or with free tensors
    any tensor Dynamo installs (``torch_internals.installed_free``), whose identity the
    signature holds too."""
    import torch

    from .. import torch_internals

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
