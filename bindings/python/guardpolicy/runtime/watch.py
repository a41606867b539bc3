"""Watch, don't check (docs/design-notes/watch.md): under ``guardpolicy.compile``, a guard the
policy decides ``watch`` leaves the guard manager torch evaluates on every call, and is
checked again only when the state it reads changes.

* **At compile time** (``plan``, from the ``guard_filter_fn``): each watched guard's source
  is walked from its root (the module bound to ``self``, an object passed in ``*args`` or
  ``**kwargs`` such as a KV cache, or a global) with torch's own
  ``Source.get_value``, and every dict it reads on the way is recorded: instance
  ``__dict__``s (with their classes' dicts), ``_modules``, ``_parameters``, ``_buffers``,
  config objects' ``__dict__``s; a global is recorded by key (its name and value: a script's
  top-level code writes its globals dict all the time). The hook dicts of every module the frame
  calls, and torch's global module hook dicts, are recorded too, whether or not torch guards
  them (``skip_nnmodule_hook_guards``). A watched guard that cannot be watched stays in
  torch's manager, as a ``keep`` (``Unwatched``: the schema's ``watch_kept_guard_types``, a
  source that starts at an input, or that passes a tensor other than a parameter, a list or
  a set). A parameter's ``TENSOR_MATCH`` is watched with the parameter recorded, its metadata
  checked on every call. The watched guards get a guard manager of their own, built by
  torch's builder.
* **After the compile** (``Watches.attach``): the cache entry's kept manager gets one more
  guard, run last: a ``_core.WatchGate`` (bindings/watch_gate.h). While none of the recorded
  dicts changed and every root is the recorded object, it returns its last verdict in C
  (with the parameters' metadata checked by torch's ``TensorGuards``), without evaluating a
  watched guard. After a change it evaluates the watched guards' manager and compares the
  hook dicts and classes with the compile's; the entry is served only when both pass, and
  torch tries its next entry or compiles otherwise (a hook added after warm-up recompiles;
  removing it serves the first entry again). Roots are held weakly: when the model dies, the
  gate lets go of what it watched.

What is watched and what stays kept is in ``guardpolicy.stats(compiled).watches``.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from .._core import WatchGate
from ..api.data import schema_list
from .watch_sources import CannotWatch, Reads, weakly, deref, read


@dataclasses.dataclass(frozen=True)
class Unwatched:
    """A guard the policy decided ``watch`` that torch checks on every call instead: its
    ``name`` and ``guard_type`` as torch offered them, and ``why``."""

    name: str
    guard_type: str
    why: str


class FramePlan:
    """What one compiled frame watches: ``reads`` (the dicts, roots and globals its watched
    guards read, a ``watch_sources.Reads``), ``sources`` (theirs, to read again for another
    object at a root), the watched guards' ``manager``, the ``gate`` once attached, and the
    watched guards that stay checked (``unwatched``)."""

    def __init__(self, globals_: dict) -> None:
        self.reads = Reads()
        self.sources: list = []
        self.globals = globals_
        self.unwatched: list[Unwatched] = []
        self.guards = 0  # watched guards taken out of torch's manager
        self.manager: Any = None
        self.gate: Any = None
        self.frozen: tuple = ()  # the hook dicts and classes compared whole, and their contents
        self.contents: tuple = ()

    def make_gate(self) -> Any:
        """The ``WatchGate`` of this frame's cache entry."""
        from . import torch_internals

        reads = self.reads
        self.freeze()
        tensors = tuple(reads.tensors.values())
        check = torch_internals.tensor_check(tensors) if tensors else None
        holder: list = []  # the gate, for the roots' death callbacks (a cycle the collector breaks)
        plan = weakref.ref(self)  # the plan holds the model: a cache entry must not
        gate = WatchGate(*reads.gate_args(lambda _ref: holder and _released(plan, holder[0])),
                         _Recheck(self), tensors, check)
        gate.freeze(self.frozen)
        holder.append(gate)
        self.gate = gate
        reads.roots = {key: obj if _is_module(obj) else weakly(obj, None) for key, obj in reads.roots.items()}
        return gate



    def freeze(self) -> None:
        """Records what the hook dicts and classes hold now (``frozen``, ``contents``)."""
        self.frozen = tuple(self.reads.hooks.values()) + tuple(
            o for o in self.reads.watched.values() if isinstance(o, type))
        self.contents = _contents(self.frozen)

    def rearm(self, gate: Any, reads: Reads) -> bool:
        """The gate watches what ``reads`` found (no verdict kept: the next call checks);
        False, and nothing changed, when a module read anew has hooks the compile did not see
        (the entry must not be served)."""
        from . import torch_internals

        known = {id(d) for d in self.frozen}
        if any(hooks and id(hooks) not in known for hooks in reads.hooks.values()):
            return False
        tensors = tuple(reads.tensors.values())
        plan = weakref.ref(self)
        gate.reset(*reads.gate_args(lambda _ref: _released(plan, gate)), tensors,
                   torch_internals.tensor_check(tensors) if tensors else None)
        reads.roots = {key: weakly(obj, None) for key, obj in reads.roots.items()}  # an adopted KV cache dies
        self.reads = reads                                                         # with its request
        self.freeze()
        gate.freeze(self.frozen)
        return True

    def read_again(self, f_locals: dict) -> Reads | None:
        """What the watched sources read from ``f_locals`` (another object at a root), or None
        when one of them cannot be watched there."""
        from . import torch_internals

        scope = {"L": f_locals, "G": self.globals, "__builtins__": __builtins__}
        closure = torch_internals.closure_vars()
        reads = Reads()
        try:
            for source, tensor_match in self.sources:
                read(source, scope, closure, reads, tensor_match)
        except Exception:  # noqa: BLE001 - not watchable there: the gate checks every such call
            return None
        for hooks in self.reads.hooks.values():  # the hook dicts compared whole stay the compile's
            reads.watch_hooks(hooks)
        return reads


def _released(plan: Any, gate: Any) -> None:
    """A root died (a KV cache at the end of its request, the model): the gate and the plan
    (``plan``, a weak reference) let go of everything read from the roots; each later call
    checks again, and adopts the next object."""
    gate.release()
    if (frame := plan()) is not None:
        frame.reads.forget()


def _contents(frozen: tuple) -> tuple[tuple, ...]:
    """What each hook dict or class holds: its keys and the identity of each value."""
    return tuple(tuple((k, id(v)) for k, v in (vars(d) if isinstance(d, type) else d).items()) for d in frozen)


class _Recheck:
    """What a gate calls after a change: the watched guards (torch's manager of them) pass
    on the frame locals, and the hook dicts and the classes (``frame.frozen``) hold what they
    held at compile time. A hook or a class attribute (a monkeypatched method) is inlined by
    Dynamo with no guard of its own when torch skips hook guards; any change to one recompiles.
    It holds its ``FramePlan`` weakly (the plan lives with the compiled object; a cache entry
    must not keep a model alive): once the plan is gone, the entry is not served again.

    Another object at a root (a new cache object for each request, a copy of the module)
    passes or fails here on every call; when the same other object comes twice in a row and
    it is not a module, the gate adopts it: its dicts are watched from then on."""

    __slots__ = ("frame", "last_other")

    def __init__(self, frame: FramePlan):
        self.frame = weakref.ref(frame)
        self.last_other: tuple = ()

    def __call__(self, f_locals: dict, changed: int = 2) -> bool:
        """``changed`` (from the gate): 0, the watched state is as the last check left it and
        only a root differs (another object passed in, a copy of the module); 1, watched state
        changed; 2, a hook dict or a class changed too (compared whole only then)."""
        frame = self.frame()
        if frame is None:
            return False
        try:
            if changed >= 2 and _contents(frame.frozen) != frame.contents:
                return False
            if frame.manager is not None and not frame.manager.check(f_locals):
                return False
            gate = frame.gate
            if gate is not None and not gate.roots_match(f_locals):
                self._maybe_adopt(frame, gate, f_locals)
            elif changed and gate is not None and frame.reads.moved():  # another object where one was read
                reads = frame.read_again(f_locals)
                return reads is not None and frame.rearm(gate, reads)
            return True
        except Exception:  # noqa: BLE001 - a guard that cannot be evaluated fails: torch compiles anew
            return False

    def _maybe_adopt(self, frame: FramePlan, gate: Any, f_locals: dict) -> None:
        """Adopts the objects now at the roots when the same ones came twice in a row and none
        is a module; the sources are read again only then."""
        other = _roots_in(frame.reads.roots, f_locals)
        if other is None or any(_is_module(obj) for obj in other):
            self.last_other = ()
            return
        ids = tuple(id(obj) for obj in other)
        if ids == self.last_other and (reads := frame.read_again(f_locals)) is not None:
            frame.rearm(gate, reads)
        self.last_other = ids


def _roots_in(roots: dict, f_locals: dict) -> list | None:
    """The objects at ``roots``' places in ``f_locals`` that differ from the recorded ones
    (None when a place is missing)."""
    out = []
    for (name, path), recorded in roots.items():
        value = f_locals.get(name, _MISSING)
        for key in path:
            try:
                value = value[key]
            except Exception:  # noqa: BLE001 - the call passes no such item
                return None
        if value is _MISSING:
            return None
        if value is not deref(recorded):
            out.append(value)
    return out


_MISSING = object()


def _is_module(value: Any) -> bool:
    import torch

    return isinstance(value, torch.nn.Module)


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
                                           f"{len(frame.reads.watched)} dicts")
            self.frames.append(frame)


def plan(entries: list, explanations: list, torch_locals: dict[str, Any], decisions: list[bool]) -> FramePlan:
    """The watching of one frame being compiled. ``decisions`` (what the filter returns to
    torch) is changed in place: a watched guard that is watched is taken out (False); so are
    ``explanations``: a watched guard that stays checked gets its reason (``checked``)."""
    from . import torch_internals

    graph = torch_locals["output_graph"]
    out = FramePlan(graph.global_scope)
    scope = {"L": graph.local_scope, "G": graph.global_scope, "__builtins__": __builtins__}
    closure = torch_internals.closure_vars()
    kept_types = set(schema_list("watch_kept_guard_types"))
    watched = []
    for i, (entry, exp) in enumerate(zip(entries, explanations)):
        if not exp.watched:
            continue
        try:
            if exp.guard_type in kept_types:
                raise CannotWatch(f"{exp.guard_type} guards are not held in a dict a watcher can see")
            source = entry.orig_guard.originating_source
            read(source, scope, closure, out.reads, exp.guard_type == "TENSOR_MATCH")
        except Exception as error:  # noqa: BLE001 - also a source torch itself could not read
            why = str(error) if isinstance(error, CannotWatch) else f"its source could not be read ({error})"
            out.unwatched.append(Unwatched(exp.name, exp.guard_type, why))
            explanations[i] = dataclasses.replace(exp, checked=why)
            continue
        decisions[i] = False
        watched.append(entry.orig_guard)
        out.sources.append((source, exp.guard_type == "TENSOR_MATCH"))
    if watched:
        for _name, hooks in torch_internals.global_module_hooks():
            out.reads.watch_hooks(hooks)
        try:
            out.manager = torch_internals.build_guard_manager(torch_locals["self"], watched, torch_locals,
                                                              lambda rows: [True] * len(rows))
        except Exception as error:  # noqa: BLE001 - torch could not build it: every watch is kept
            for i, exp in enumerate(explanations):
                if exp.watched and not decisions[i]:
                    decisions[i] = True
                    explanations[i] = dataclasses.replace(exp, checked=f"the watched guards' manager failed: {error}")
            return FramePlan(graph.global_scope)
    out.guards = len(watched)
    return out
