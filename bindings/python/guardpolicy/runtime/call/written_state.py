"""What a call may write, kept so that verify can run a call twice from the same state and
compare what each run wrote (``call.compared``).

A ``WrittenState`` walks what the top-level frame reaches (its locals: the module as
``self``, the arguments, the closure's cells' contents, and the globals its code reads or
assigns) and records, per object, shallowly:

* a dict, list or set: its items; an object with a ``__dict__`` (an ``nn.Module``, a config,
  a dataclass): its class and its ``__dict__`` items (a module's ``_parameters``,
  ``_buffers``, ``_modules`` and hook dicts are dicts like any other);
* a global the code assigns: what the name is bound to;
* a tensor: its version counter only (verify never restores a tensor: a run that writes
  one is not repeated).

``restore()`` puts every recorded container back as it was (the same item objects, by
identity); ``written()`` says which containers differ now and what they hold
(``Written``); ``tensors_moved()`` whether a tensor's version counter moved. Numbers,
strings, ``None``, classes, functions, Python modules and objects without a ``__dict__`` (a
``deque``, a ``__slots__`` class) are leaves: not walked, compared as values. The walk stops
at ``MAX_OBJECTS`` (``complete`` False), and then verify compares nothing.

A smaller cousin of the audits' snapshot (``tools.mutation.state``), which also copies and
restores tensors; this one is what verify needs on a sampled call, and no more.
"""

from __future__ import annotations

import dis
import types
import weakref
from typing import Any, Iterable

#: Walking stops after this many objects: a model that reaches half the interpreter is not
#: compared (verify counts the violation, as without the comparison).
MAX_OBJECTS = 100_000

_LEAVES = (str, bytes, int, float, complex, bool, type(None), type, types.ModuleType, range, frozenset,
           types.FunctionType, types.BuiltinFunctionType, types.MethodWrapperType, types.WrapperDescriptorType,
           types.CodeType, weakref.ref, property, classmethod, staticmethod)

#: What ``Written`` holds for a global the run deleted (and a binding for an unbound name).
MISSING = object()


class Written:
    """What differs from a ``WrittenState`` after a run: per container (its ``id``; a global:
    ``("global", id(globals), name)``) what it holds now, ``(kind, contents, label)``:
    ``"dict"`` and its items, ``"list"`` its items, ``"set"`` a set, ``"object"`` its class and
    ``__dict__`` items, ``"global"`` the value bound (or ``MISSING``); ``label`` says where, for
    a message (``"`Denoiser` attribute 'last'"``)."""

    __slots__ = ("changes",)

    def __init__(self, changes: dict[Any, tuple[str, Any, str]]):
        self.changes = changes

    def __len__(self) -> int:
        return len(self.changes)


class WrittenState:
    """The state reachable from ``roots`` (values) and the globals ``bindings`` (``(globals
    dict, name)``) now; see the module docstring."""

    def __init__(self, roots: Iterable[Any], bindings: Iterable[tuple[dict, str]] = ()):
        self.dicts: list[tuple[dict, list]] = []
        self.lists: list[tuple[list, list]] = []
        self.sets: list[tuple[set, list]] = []
        self.objects: list[tuple[Any, type, list]] = []
        self.bindings: list[tuple[dict, str, Any]] = []
        self.tensors: list[tuple[Any, int]] = []
        self.complete = True
        self._seen: set[int] = set()
        for scope, name in bindings:
            value = scope.get(name, MISSING)
            self.bindings.append((scope, name, value))
            self._walk(value)
        for root in roots:
            self._walk(root)
        del self._seen

    def _walk(self, root: Any) -> None:
        import torch

        stack = [root]
        seen = self._seen
        while stack:
            obj = stack.pop()
            if obj is MISSING or isinstance(obj, _LEAVES) or id(obj) in seen:
                continue
            if len(seen) >= MAX_OBJECTS:
                self.complete = False
                return
            seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                self.tensors.append((obj, obj._version))
            elif isinstance(obj, dict):
                items = list(obj.items())
                self.dicts.append((obj, items))
                stack.extend(v for _, v in items)
            elif isinstance(obj, list):
                self.lists.append((obj, list(obj)))
                stack.extend(obj)
            elif isinstance(obj, set):
                self.sets.append((obj, list(obj)))
                stack.extend(obj)
            elif isinstance(obj, tuple):
                stack.extend(obj)
            elif isinstance(obj, types.MethodType):
                stack.append(obj.__self__)
            elif isinstance(getattr(obj, "__dict__", None), dict):
                items = list(obj.__dict__.items())
                self.objects.append((obj, type(obj), items))
                stack.extend(v for _, v in items)

    def restore(self) -> None:
        """Puts every recorded container and binding back as it was (idempotent)."""
        for scope, name, value in self.bindings:
            if value is MISSING:
                scope.pop(name, None)
            elif scope.get(name, MISSING) is not value:
                scope[name] = value
        for obj, cls, items in self.objects:
            if type(obj) is not cls:
                obj.__class__ = cls
            if not _same_items(obj.__dict__.items(), items):
                obj.__dict__.clear()
                obj.__dict__.update(items)
        for d, items in self.dicts:
            if not _same_items(d.items(), items):
                type(d).clear(d)  # an OrderedDict keeps its own order: its own methods
                setitem = dict.__setitem__ if type(d).__setitem__ is dict.__setitem__ else type(d).__setitem__
                for k, v in items:
                    setitem(d, k, v)
        for seq, items in self.lists:
            if not _same_seq(seq, items):
                list.__setitem__(seq, slice(None), items)
        for s, items in self.sets:
            if len(s) != len(items) or not all(x in s for x in items):
                set.clear(s)
                set.update(s, items)

    def written(self) -> Written:
        """Which recorded containers and bindings differ now, and what they hold."""
        changes: dict[Any, tuple[str, Any, str]] = {}
        for scope, name, value in self.bindings:
            now = scope.get(name, MISSING)
            if now is not value:
                changes[("global", id(scope), name)] = ("global", now, f"global `{name}`")
        for obj, cls, items in self.objects:
            if type(obj) is not cls or not _same_items(obj.__dict__.items(), items):
                now = list(obj.__dict__.items())
                what = f"`{type(obj).__name__}` attribute {_keys_differing(now, items)}"
                changes[id(obj)] = ("object", (type(obj), now), what)
        for d, items in self.dicts:
            if not _same_items(d.items(), items):
                now = list(d.items())
                changes[id(d)] = ("dict", now, f"dict items {_keys_differing(now, items)}")
        for seq, items in self.lists:
            if not _same_seq(seq, items):
                changes[id(seq)] = ("list", list(seq), f"a list of {len(items)} items")
        for s, items in self.sets:
            if len(s) != len(items) or not all(x in s for x in items):
                changes[id(s)] = ("set", set(s), f"a set of {len(items)} items")
        return Written(changes)

    def tensors_moved(self) -> bool:
        """Whether a recorded tensor's version counter moved (it was written in place)."""
        return any(t._version != version for t, version in self.tensors)


def code_globals(code: Any, scope: dict) -> tuple[list[Any], list[tuple[dict, str]]]:
    """The globals of ``scope`` (a function's ``__globals__``) that ``code`` reads
    (``(values)``) and those it assigns or deletes (``(scope, name)`` bindings), read from its
    bytecode (``LOAD_GLOBAL``, ``STORE_GLOBAL``, ``DELETE_GLOBAL``); nested functions'
    globals are not. Cached per code object."""
    names = _GLOBAL_NAMES.get(code)
    if names is None:
        read, assigned = set(), set()
        for ins in dis.get_instructions(code):
            if ins.opname == "LOAD_GLOBAL":
                read.add(ins.argval)
            elif ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                assigned.add(ins.argval)
        names = _GLOBAL_NAMES[code] = (tuple(sorted(read - assigned)), tuple(sorted(assigned)))
    read, assigned = names
    return [scope[n] for n in read if n in scope], [(scope, n) for n in assigned]


_GLOBAL_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _same_items(now: Iterable, was: list) -> bool:
    now = list(now)
    return len(now) == len(was) and all(k1 == k2 and v1 is v2 for (k1, v1), (k2, v2) in zip(now, was))


def _same_seq(now: list, was: list) -> bool:
    return len(now) == len(was) and all(a is b for a, b in zip(now, was))


def _keys_differing(now: list, was: list) -> str:
    a, b = dict(now), dict(was)
    keys = [k for k in {**a, **b} if a.get(k, MISSING) is not b.get(k, MISSING)]
    return ", ".join(repr(k) for k in keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
