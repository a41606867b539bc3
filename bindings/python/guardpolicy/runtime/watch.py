"""Watch, don't check (docs/design-notes/watch.md): under ``guardpolicy.compile``, a guard the
policy decides ``watch`` leaves the guard manager torch evaluates on every call, and is
checked again only when the state it reads changes.

* **At compile time** (``plan``, from the ``guard_filter_fn``): each watched guard's source
  is walked from its root (the module bound to ``self``, or a global) with torch's own
  ``Source.get_value``, and every dict it reads on the way is recorded: instance
  ``__dict__``s (with their classes' dicts), ``_modules``, ``_parameters``, ``_buffers``,
  config objects' ``__dict__``s; a global is recorded by key (its name and value: a script's
  top-level code writes its globals dict all the time). The hook dicts of every module the frame
  calls, and torch's global module hook dicts, are recorded too, whether or not torch guards
  them (``skip_nnmodule_hook_guards``). A watched guard that cannot be watched stays in
  torch's manager, as a ``keep`` (``Unwatched``: the schema's ``watch_kept_guard_types``, a
  source that starts at an input, or that passes a tensor, a list or a set). The watched
  guards get a guard manager of their own, built by torch's builder.
* **After the compile** (``Watches.attach``): the cache entry's kept manager gets one more
  guard, run last: a ``_core.WatchGate`` (bindings/watch_gate.h). While none of the recorded
  dicts changed and ``self`` is the recorded module, it returns its last verdict in C, without
  evaluating a watched guard. After a change it evaluates the watched guards' manager and
  compares the hook dicts with the compile's; the entry is served only when both pass, and
  torch tries its next entry or compiles otherwise (a hook added after warm-up recompiles;
  removing it serves the first entry again).

What is watched and what stays kept is in ``guardpolicy.stats(compiled).watches``.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import types
from typing import Any

from .._core import WatchGate
from ..api.data import schema_list

#: nn.Module's per-instance hook dicts that change what a call runs.
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range, slice)
_UNWATCHABLE = (list, set, bytearray, collections.deque)


class _CannotWatch(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Unwatched:
    """A guard the policy decided ``watch`` that torch checks on every call instead: its
    ``name`` and ``guard_type`` as torch offered them, and ``why``."""

    name: str
    guard_type: str
    why: str


class FramePlan:
    """What one compiled frame watches: the objects whose dicts its gate watches (dicts and
    classes), the roots (the modules the sources start from, by local name and position), the hook dicts and their keys at compile time,
    the globals read (by key: dict, name, value), the watched guards' manager, and the
    watched guards that stay checked (``unwatched``)."""

    def __init__(self) -> None:
        self.watched: dict[int, Any] = {}  # id -> dict or class
        self.roots: dict[tuple[str, int], Any] = {}  # (local, position in a *args tuple or -1) -> module
        self.keyed: dict[tuple[int, str], tuple[dict, str, Any]] = {}  # globals, read by key
        self.hooks: dict[int, dict] = {}
        self.unwatched: list[Unwatched] = []
        self.guards = 0  # watched guards taken out of torch's manager
        self.manager: Any = None
        self.gate: Any = None

    def watch(self, obj: Any) -> None:
        self.watched.setdefault(id(obj), obj)

    def make_gate(self) -> Any:
        """The ``WatchGate`` of this frame's cache entry."""
        frozen = tuple(self.hooks.values()) + tuple(o for o in self.watched.values() if isinstance(o, type))
        recheck = _Recheck(self.manager, frozen, _contents(frozen))
        roots = tuple((name, position, obj) for (name, position), obj in self.roots.items())
        self.gate = WatchGate(tuple(self.watched.values()), roots,
                              tuple(self.keyed.values()), recheck)
        return self.gate


def _contents(frozen: tuple) -> tuple[tuple, ...]:
    """What each hook dict or class holds: its keys and the identity of each value."""
    return tuple(tuple((k, id(v)) for k, v in (vars(d) if isinstance(d, type) else d).items()) for d in frozen)


class _Recheck:
    """What a gate calls after a change: the watched guards (torch's manager of them) pass
    on the frame locals, and the hook dicts and the classes (``frozen``) hold what they held
    at compile time. A hook or a class attribute (a monkeypatched method) is inlined by Dynamo
    with no guard of its own when torch skips hook guards; any change to one recompiles."""

    __slots__ = ("manager", "frozen", "contents")

    def __init__(self, manager: Any, frozen: tuple, contents: tuple[tuple, ...]):
        self.manager = manager
        self.frozen = frozen
        self.contents = contents

    def __call__(self, f_locals: dict) -> bool:
        try:
            if _contents(self.frozen) != self.contents:
                return False
            return self.manager is None or bool(self.manager.check(f_locals))
        except Exception:  # noqa: BLE001 - a guard that cannot be evaluated fails: torch compiles anew
            return False


class Watches:
    """The watching of one compiled object (``guardpolicy.stats(compiled).watches``):
    ``frames``, a ``FramePlan`` per compiled frame whose gate is attached (they hold strong
    references to the watched dicts); ``rechecks``, the calls that evaluated watched guards,
    over all frames (counted in C)."""

    def __init__(self) -> None:
        self.frames: list[FramePlan] = []
        self._pending: list[tuple[Any, FramePlan]] = []

    @property
    def rechecks(self) -> int:
        return sum(f.gate.rechecks for f in self.frames if f.gate is not None)

    @property
    def unwatched(self) -> list[Unwatched]:
        return [u for f in self.frames for u in f.unwatched]

    def add(self, cfm: Any, frame: FramePlan) -> None:
        self._pending.append((cfm, frame))

    def attach(self) -> None:
        """Adds each pending frame's gate to its cache entry's kept manager (torch's compile
        is over: ``CheckFunctionManager.guard_manager`` holds it). A compile that failed
        after the filter has no manager, and is dropped."""
        from . import torch_internals

        pending, self._pending = self._pending, []
        for cfm, frame in pending:
            manager = getattr(cfm, "guard_manager", None)
            if manager is None or torch_internals.is_deleted(manager) or frame.guards == 0:
                continue
            torch_internals.add_last_guard(manager, frame.make_gate(),
                                           f"guardpolicy watch: {frame.guards} watched guards, "
                                           f"{len(frame.watched)} dicts")
            self.frames.append(frame)


def plan(entries: list, explanations: list, torch_locals: dict[str, Any], decisions: list[bool]) -> FramePlan:
    """The watching of one frame being compiled. ``decisions`` (what the filter returns to
    torch) is changed in place: a watched guard that is watched is taken out (False)."""
    from . import torch_internals

    out = FramePlan()
    graph = torch_locals["output_graph"]
    scope = {"L": graph.local_scope, "G": graph.global_scope, "__builtins__": __builtins__}
    closure = torch_internals.closure_vars()
    kept_types = set(schema_list("watch_kept_guard_types"))
    watched = []
    for i, (entry, exp) in enumerate(zip(entries, explanations)):
        if not exp.watched:
            continue
        try:
            if exp.guard_type in kept_types:
                raise _CannotWatch(f"{exp.guard_type} guards are not held in a dict a watcher can see")
            source = entry.orig_guard.originating_source
            _read(source, scope, closure, out)
        except _CannotWatch as why:
            out.unwatched.append(Unwatched(exp.name, exp.guard_type, str(why)))
            continue
        except Exception as error:  # noqa: BLE001 - a source torch itself could not read: checked per call
            out.unwatched.append(Unwatched(exp.name, exp.guard_type, f"its source could not be read ({error})"))
            continue
        decisions[i] = False
        watched.append(entry.orig_guard)
    out.guards = len(watched)
    if watched:
        for _name, hooks in torch_internals.global_module_hooks():
            _watch_hooks(hooks, out)
        out.manager = torch_internals.build_guard_manager(torch_locals["self"], watched, torch_locals,
                                                          lambda rows: [True] * len(rows))
    return out


def _read(source: Any, scope: dict, closure: dict, out: FramePlan) -> None:
    """Records in ``out`` every dict ``source`` reads, from its root to its value; raises
    ``_CannotWatch`` where one read is not of a dict."""
    from . import torch_internals

    S = torch_internals.dynamo_sources()  # noqa: N806 - Dynamo's source classes
    chain = [source]
    while hasattr(chain[-1], "base"):
        chain.append(chain[-1].base)
    root = chain[-1]
    cache: dict = {}
    if isinstance(root, S.LocalSource):
        value, position = root.get_value(scope, closure, cache), -1
        if isinstance(value, tuple) and len(chain) > 1 and isinstance(chain[-2], S.GetItemSource) \
                and isinstance(chain[-2].index, int):  # a wrapper's `*args`: the module is args[i]
            position = chain[-2].index
            value = chain[-2].get_value(scope, closure, cache)
            chain.pop()  # the tuple, passed anew on every call, is not watched
        if not _is_module(value):
            raise _CannotWatch(f"its source starts at the input L[{root.local_name!r}], passed anew on every call")
        key = (root.local_name, position)
        if key not in out.roots:  # the frame's module: the hooks of every module it calls
            out.roots[key] = value
            for sub in list(value.modules())[1:]:
                _watch_hooks_of(sub, out)
        elif out.roots[key] is not value:
            raise _CannotWatch(f"L[{root.local_name!r}] holds another object")
        root = chain[-1]
    elif isinstance(root, S.GlobalSource):  # a module's globals change often: only this one is compared
        g = scope["G"]
        out.keyed[(id(g), root.global_name)] = (g, root.global_name, root.get_value(scope, closure, cache))
    else:
        raise _CannotWatch(f"its source starts at a {type(root).__name__}")
    parent = None
    for node in reversed(chain):
        value = node.get_value(scope, closure, cache)
        if parent is not None and isinstance(node, S.AttrSource):
            _check_attribute(parent, node.member)
        # a module's own hooks run outside its frame: those of what the frame calls are watched
        _watch_value(value, out, node is not root or isinstance(root, S.GlobalSource))
        parent = value


def _check_attribute(owner: Any, member: str) -> None:
    """Raises ``_CannotWatch`` when ``owner.member`` is computed by a data descriptor (a
    property, a slot) rather than read from a dict."""
    instance_dict = getattr(owner, "__dict__", None)
    if isinstance(instance_dict, dict) and member in instance_dict:
        return
    found = inspect.getattr_static(owner if isinstance(owner, type) else type(owner), member, None)
    if hasattr(type(found), "__set__") or hasattr(type(found), "__get__") and not inspect.isroutine(found):
        raise _CannotWatch(f"`{member}` is computed by a {type(found).__name__}, not read from a dict")


def _watch_value(value: Any, out: FramePlan, hooks: bool) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        raise _CannotWatch("a tensor's metadata changes without any dict changing")
    if isinstance(value, _UNWATCHABLE):
        raise _CannotWatch(f"a {type(value).__name__} is not a dict a watcher can see")
    if isinstance(value, dict):
        out.watch(value)
    elif isinstance(value, type):
        _watch_class(value, out)
    elif isinstance(value, types.ModuleType):
        out.watch(vars(value))
    elif not isinstance(value, _IMMUTABLE):
        instance_dict = getattr(value, "__dict__", None)
        if isinstance(instance_dict, dict):
            out.watch(instance_dict)
        _watch_class(type(value), out)
        if hooks and _is_module(value):
            _watch_hooks_of(value, out)


def _watch_class(cls: type, out: FramePlan) -> None:
    for klass in cls.__mro__:
        if klass is not object:
            out.watch(klass)


def _is_module(value: Any) -> bool:
    import torch

    return isinstance(value, torch.nn.Module)


def _watch_hooks_of(module: Any, out: FramePlan) -> None:
    for name in HOOK_DICTS:
        hooks = vars(module).get(name)
        if isinstance(hooks, dict):
            _watch_hooks(hooks, out)


def _watch_hooks(hooks: dict, out: FramePlan) -> None:
    out.watch(hooks)
    out.hooks.setdefault(id(hooks), hooks)
