"""Watch, don't check (docs/design-notes/watch.md): under ``guardpolicy.compile``, a guard the
policy decides ``watch`` leaves the guard manager torch evaluates on every call, and is
checked again only when the state it reads changes.

* **At compile time** (``plan``, from the ``guard_filter_fn``): each watched guard's source
  is walked from its root (the module bound to ``self``, an object passed in ``*args`` or
  ``**kwargs`` such as a KV cache, or a global) with torch's own ``Source.get_value``, and
  what it reads on the way is recorded (``watch.reads.Reads``): dicts, classes, objects,
  functions, globals, the hook dicts of every module the frame calls and torch's global ones.
  A watched guard that cannot be watched stays in torch's manager, as a ``keep``
  (``Unwatched``). The watched guards get a guard manager of their own, built by torch's
  builder, and the compile's ``signature``: the hooks and classes its code inlined.
* **After the compile** (``Watches.attach``): the cache entry's kept manager gets a guard run
  last per group of watched guards that share roots (``watch.roots.groups``: the frame's
  module and globals; each other object passed in, such as a KV cache or an options object):
  a ``_core.WatchGate`` (bindings/runtime/watch/watch_gate.h) holding one ``_core.WatchState``
  per set of that group's roots (bindings/runtime/watch/watch_state.h), the compile's first,
  with no verdict yet: the first call checks. A new object at one root is read again alone.
* **Per call**, in C: the state of the call's roots, when armed and unchanged, gives its verdict.
  Otherwise ``Recheck`` (``watch.recheck``) runs: it builds a new state when the roots have none (a second
  instance, an adopted KV cache) or when what the state holds moved, and then evaluates the
  watched guards' manager and compares the signature with the compile's. Roots are held weakly:
  when one dies its state is dropped; a state holds nothing that holds its root by construction.
* **Lifetimes** (``watch.release``): a gate lets go of its states when its compiled object dies
  or torch drops its cache entry (``torch._dynamo.reset()``), and goes with torch's manager.

What is watched and what stays kept is in ``guardpolicy.stats(compiled).watches``.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from ..._core import WATCH_STATES_PER_ENTRY, WatchGate, WatchState
from ...api.data import schema_list
from .free_tensors import INSTANCES_WITH_FREE_TENSORS, MOVED_TENSORS  # noqa: F401 - watch's names for them
from .free_tensors import note as note_moved_tensors
from .hot import Hot
from .kinds import CannotWatch
from .recheck import Recheck
from .release import FREED, Lease, listen, settle
from .roots import groups, own_root
from .reads import Reads, deref, weakly
from .sources import Walk, read


@dataclasses.dataclass(frozen=True)
class Unwatched:
    """A guard the policy decided ``watch`` that torch checks on every call instead: its
    ``name`` and ``guard_type`` as torch offered them, and ``why``."""

    name: str
    guard_type: str
    why: str


class GroupPlan:
    """What one group of roots of a compiled frame watches (``plan``): ``reads`` (what its
    watched guards read at compile time, a ``watch.reads.Reads``), ``sources`` (theirs, read
    again for other roots, each with what it reads: ``_READING``), the watched guards'
    ``manager``, the compile's ``signature``
    (``Reads.signature``), the ``gate`` once attached, and the frame's watched guards that
    stay checked (``unwatched``, in its first plan). ``reads_ambient``: it also reads what
    every call of the frame reads (torch's global hooks, the builtins; the frame's first plan)."""

    def __init__(self, globals_: dict, code: Any = None, traced: frozenset = frozenset(),
                 free_tensors: bool = False, reads_ambient: bool = True) -> None:
        self.globals = globals_
        self.code = code
        self.traced = traced
        self.free_tensors = free_tensors
        self._reads: Any = Reads(traced, free_tensors, code)  # a weak reference once its state holds it
        self.sources: list = []
        self.unwatched: list[Unwatched] = []
        self.guards = 0  # watched guards taken out of torch's manager
        self.manager: Any = None
        self.signature: tuple = ()
        self.gate: Any = None
        self.hot = Hot()  # its walks in a row (watch.hot)
        self.label = ""  # its frame and roots, named once attached (Watches.hot, the log)
        self.compile_id = ""  # Dynamo's compile id of its frame ("0/1"), set by ``plan``
        self.reason: list[str] | None = None  # its gate guard's text, which torch prints when it fails (recheck.say)
        self.reason_text = ""
        self.reads_ambient = reads_ambient  # what every call reads (global hooks, builtins): in one plan of a frame
        self.entry_manager: Any = None  # its cache entry's kept manager, weakly, once attached (until queued stale)
        self.lease: Lease | None = None  # its gate's ties to torch, once attached (watch.release)

    @property
    def may_go_hot(self) -> bool:
        """Whether torch's manager of the watched guards checks all ``torch.compile`` would:
        the compile installed no tensor of this group as a free tensor (the signature's last
        part, their identities, is empty)."""
        return bool(self.signature) and not self.signature[-1]

    def note_tensors(self, reads: Reads, signature: tuple) -> None:
        """Notes that the code's installed tensors moved (``free_tensors.note``), when the
        tensors' identities (``Reads.signature``: last) differ from the compile's: replaced at
        the same roots, or another instance's. Replaced at the same roots, the cache entry's
        graph holds tensors its roots no longer do: it is retired at the next ``attach``, after
        the compile this failure starts; where the code holds ``recompile_limit`` entries (one
        per static shape), it leaves torch's count at once (``torch_internals.uncount``), so
        that compile is not refused (below the limit it stays counted: torch then sees a
        recompile, and logs its reason)."""
        from .. import torch_internals

        if not self.signature or signature[-1] == self.signature[-1] or self.code is None:
            return
        compiled = self.reads
        same_roots = compiled is not None and list(compiled.roots) == list(reads.roots) and all(
            deref(a) is deref(b) for a, b in zip(compiled.roots.values(), reads.roots.values()))
        note_moved_tensors(self.code, same_roots)
        if same_roots and (manager := deref(self.entry_manager)) is not None:
            STALE_ENTRIES.append(self.entry_manager)
            self.entry_manager = None  # queued once, however many calls fail before the next attach
            if len(torch_internals.all_cache_entries(self.code)) >= torch_internals.config_value("recompile_limit"):
                torch_internals.uncount(manager)

    @property
    def reads(self) -> Reads | None:
        """What the watched sources read at compile time (the first state's; None once its
        roots died and the state was dropped: nothing of a dead model is kept)."""
        return deref(self._reads)

    @reads.setter
    def reads(self, reads: Reads) -> None:
        self._reads = reads

    def ambient(self, reads: Reads) -> None:
        """What every call of the frame reads besides its sources: torch's global module hooks
        and the builtins its own code reads."""
        from .. import torch_internals

        for name, hooks in torch_internals.global_module_hooks():
            reads.watch_hooks(hooks, (("", ()), "<global>", name))
        if self.code is not None:
            reads.watch_builtins(self.code, self.globals)
        reads.watch_traced_globals(self.globals)

    def read(self, f_locals: dict) -> Reads | None:
        """What the watched sources read from ``f_locals``, or None when one of them cannot be
        watched there."""
        from .. import torch_internals

        scope = {"L": f_locals, "G": self.globals, "__builtins__": __builtins__}
        closure = torch_internals.closure_vars()
        reads, walk = Reads(self.traced, self.free_tensors, self.code), Walk()
        try:
            for source, reading in self.sources:
                read(source, scope, closure, reads, reading == "tensor", walk, reading == "absent")
        except Exception:  # noqa: BLE001 - not watchable there: the gate checks every such call
            return None
        if self.reads_ambient:
            self.ambient(reads)
        return reads

    def state(self, reads: Reads) -> Any:
        """A ``WatchState`` of ``reads``, armed on the state of its dicts now (so built before
        the guards are evaluated); its roots held weakly from then on."""
        from .. import torch_internals

        reads.weaken_roots(self.gate.prune)
        rows = reads.state_rows()
        tensors = rows["tensors"]
        reads.settle()  # the state holds its rows as it must (watch_state.h, "Lifetimes"); the reads let go of theirs
        return WatchState(**rows, tensor_check=torch_internals.tensor_check(tensors) if tensors else None, info=reads)


def _never(f_locals: dict) -> bool:
    return False


def _live_manager(cfm: Any) -> Any:
    """The kept guard manager of the compile ``cfm`` (``CheckFunctionManager.guard_manager``,
    torch's compile being over), or None: a compile that failed after the filter, a deleted one."""
    from .. import torch_internals

    manager = getattr(cfm, "guard_manager", None)
    return None if manager is None or torch_internals.is_deleted(manager) else manager


class Watches:
    """The watching of one compiled object (``guardpolicy.stats(compiled).watches``):
    ``frames``, a ``GroupPlan`` per group of roots of each compiled frame (``plan``) whose
    gate is attached (its ``gate`` None once torch dropped its cache entry: ``drop_gone``); ``rechecks``, the
    calls that evaluated watched guards, over all frames (counted in C); ``model``, the
    ``nn.Module`` compiled (held weakly; None for a function, a module compiled in place, or a
    copy), whose modules tell which frames run one of many instances (``free_tensors``)."""

    def __init__(self) -> None:
        self.frames: list[GroupPlan] = []
        self._pending: list[tuple[Any, GroupPlan]] = []
        self._retiring: list[tuple[Any, str]] = []
        self._model: Any = None
        self._gone_rechecks = 0  # the rechecks of the frames whose cache entries torch dropped (drop_gone)

    @property
    def model(self) -> Any:
        return deref(self._model)

    @model.setter
    def model(self, model: Any) -> None:
        self._model = weakly(model, None)

    @property
    def rechecks(self) -> int:
        return self._gone_rechecks + sum(f.gate.rechecks for f in self.frames if f.gate is not None)

    def drop_gone(self) -> None:
        """Lets go of the gates (and the watched guards' managers) of the frames whose cache
        entries torch dropped (``torch._dynamo.reset()``): each gate releases its states and
        goes with torch's manager (``watch.release``); the frames stay, a record of what was
        watched, their rechecks counted on."""
        for frame in self.frames:
            if frame.gate is not None and frame.lease.entry_gone:
                self._gone_rechecks += frame.gate.rechecks
                frame.lease.end()
                frame.gate = frame.manager = None

    @property
    def hot(self) -> dict[str, int]:
        """The groups rechecked call after call (``watch.hot``) and how many calls each had
        answered by torch's manager of its guards alone, by the gate's label."""
        return self.hot_in(None)

    def hot_in(self, compile_id: str | None) -> dict[str, int]:
        """``hot``, of the groups of the frame compiled as ``compile_id`` ("0/1"; None: all,
        the calls of groups of one label summed over the frame's compiles)."""
        calls: dict[str, int] = {}
        for f in self.frames:
            if f.hot.calls and compile_id in (None, f.compile_id):
                calls[f.label] = calls.get(f.label, 0) + f.hot.calls + (f.gate.hot_calls if f.gate is not None else 0)
        return calls

    @property
    def unwatched(self) -> list[Unwatched]:
        return [u for f in self.frames for u in f.unwatched]

    def add(self, cfm: Any, plans: list[GroupPlan]) -> None:
        self._pending += [(cfm, frame) for frame in plans]

    def retire(self, cfm: Any, why: str) -> None:
        """The cache entry being compiled serves no call after its first (which runs the graph
        it compiled for it): a guard that fails, saying ``why``, is added at ``attach``."""
        self._retiring.append((cfm, why))

    def attach(self) -> None:
        """Adds each pending frame's gate, and each retired entry's failing guard, to its cache
        entry's kept manager (``_live_manager``: a compile that failed has none, and is dropped)."""
        from .. import torch_internals

        settle()  # the managers of gates that let go leave torch's CheckFunctionManagers (never during a call)
        retiring, self._retiring = self._retiring, []
        for cfm, why in retiring:
            if (manager := _live_manager(cfm)) is not None:
                torch_internals.add_last_guard(manager, _never, why)
        while STALE_ENTRIES:
            _invalidate(STALE_ENTRIES.pop(), "guardpolicy: its installed tensors were replaced")
        pending, self._pending = self._pending, []
        for cfm, frame in pending:
            manager = _live_manager(cfm)
            if manager is None or frame.guards == 0:
                continue
            frame.gate = WatchGate(Recheck(frame))
            frame.label = _label(frame)
            frame.gate.install(frame.state(frame.reads))
            frame.reads = weakref.ref(frame.reads)  # the state holds it, until its roots die
            frame.reason_text = f"guardpolicy watch: {frame.guards} watched guards, {frame.reads.dicts} dicts"
            frame.reason = torch_internals.add_last_guard(manager, frame.gate, frame.reason_text)
            # the entry is never served once its plan is gone: torch frees it and does not count
            # it toward recompile_limit (a model rebuilt and compiled anew ten times); its gate
            # lets go of all it holds, and goes with torch's manager (watch.release)
            frame.entry_manager = weakref.ref(manager)
            frame.lease = Lease(frame.gate, manager, cfm)
            weakref.finalize(frame, frame.lease.end, FREED)
            self.frames.append(frame)
            listen(self)


def _label(frame: GroupPlan) -> str:
    """``frame``'s compiled code and the names of its roots: ``Net.forward (self)``."""
    code = getattr(frame.code, "co_qualname", getattr(frame.code, "co_name", "?"))
    roots = sorted({str(name) for name, _ in frame.reads.roots}) if frame.reads is not None else []
    return f"{code} ({', '.join(roots)})"


def _invalidate(manager: Any, why: str = FREED) -> None:
    """Invalidates the cache entry of the guard manager ``manager`` (a weak reference), if torch
    still holds it (``torch_internals.retire``: out of the ``recompile_limit`` count too)."""
    from .. import torch_internals

    wrapper = manager()
    entry = getattr(wrapper, "cache_entry", None)
    if entry is not None:
        torch_internals.retire(entry, why)


#: The kept managers (weak references) of cache entries whose installed tensors were replaced at
#: their roots (``GroupPlan.note_tensors``), retired at the next ``Watches.attach``: never
#: during a call, while torch's lookup walks the entries.
STALE_ENTRIES: list = []


#: The states a cache entry's gate keeps, the oldest dropped first: one per set of roots, so
#: one per block of a model compiled block by block (regional compilation of 82 layers). The
#: gate's own default (bindings/runtime/watch/watch_gate.h), its one home.
STATES_PER_ENTRY = WATCH_STATES_PER_ENTRY
#: What a watched guard's source reads, by its guard type (``sources.read``): a value that may be
#: a tensor (a parameter's metadata is then checked on every call), or an attribute that may be
#: absent (``HASATTR``); any other guard type reads a value.
_READING = {"TENSOR_MATCH": "tensor", "DUPLICATE_INPUT": "tensor", "HASATTR": "absent"}


def _sources(guard: Any, guard_type: str) -> tuple:
    """What a watched guard reads: its source, and for ``DUPLICATE_INPUT`` (``a is b``) the
    other one too, so that a change on either path is seen."""
    from .. import torch_internals

    if guard_type != "DUPLICATE_INPUT":
        return (guard.originating_source,)
    other = torch_internals.duplicate_source(guard)
    if other is None:
        raise CannotWatch("torch did not say which source this DUPLICATE_INPUT compares with")
    return guard.originating_source, other


def plan(entries: list, explanations: Any, torch_locals: dict[str, Any], decisions: list[bool]) -> list[GroupPlan]:
    """The watching of one frame being compiled: a ``GroupPlan`` per group of watched guards
    that share roots (``watch.roots.groups``: the frame's module and globals, and each other
    object passed in, such as a KV cache or an options object), the frame's own reads (global
    hooks, builtins) and the watched guards that stay checked in the first; none for a group
    that could not be watched. ``decisions`` (what the filter returns to torch) is changed
    in place: a watched guard that is watched is taken out (False); so are ``explanations``: a
    watched guard that stays checked gets its reason (``checked``). ``explanations``: a
    ``FrameExplanations``, whose frame's compile id each plan takes."""
    from .. import torch_internals

    graph = torch_locals["output_graph"]
    traced = torch_internals.traced_code(graph)
    free = torch_internals.has_config("install_free_tensors") and bool(torch_internals.config_value("install_free_tensors"))
    scope = {"L": graph.local_scope, "G": graph.global_scope, "__builtins__": __builtins__}
    closure = torch_internals.closure_vars()
    kept_types = set(schema_list("watch_kept_guard_types"))
    walk, scratch = Walk(), Reads(traced, free, torch_locals.get("f_code"))
    watched, unwatched = [], []  # (index, guard, its sources, their roots); Unwatched
    for i, (entry, exp) in enumerate(zip(entries, explanations)):
        if not exp.watched:
            continue
        try:
            if exp.guard_type in kept_types:
                raise CannotWatch(f"{exp.guard_type} guards are not held in a dict a watcher can see")
            sources = _sources(entry.orig_guard, exp.guard_type)
            reading = _READING.get(exp.guard_type, "")
            roots = {own_root(read(source, scope, closure, scratch, reading == "tensor", walk, reading == "absent"),
                              scratch) for source in sources}
        except Exception as error:  # noqa: BLE001 - also a source torch itself could not read
            why = str(error) if isinstance(error, CannotWatch) else f"its source could not be read ({error})"
            unwatched.append(Unwatched(exp.name, exp.guard_type, why))
            explanations[i] = dataclasses.replace(exp, checked=why)
            continue
        decisions[i] = False
        watched.append((i, entry.orig_guard, [(s, reading) for s in sources], roots))
    numbers = groups([roots for *_, roots in watched])
    plans: list[GroupPlan] = []
    for n in range(max(numbers, default=-1) + 1):
        group = [w for w, g in zip(watched, numbers) if g == n]
        made = _group_plan(group, graph, torch_locals, traced, free, first=not plans, explanations=explanations,
                           decisions=decisions)
        if made.guards:  # else its guards are kept (and the frame's own reads go to the next)
            made.compile_id = explanations.frame.compile_id
            plans.append(made)
    if plans:
        plans[0].unwatched = unwatched
    return plans


def _group_plan(group: list, graph: Any, torch_locals: dict[str, Any], traced: frozenset, free: bool, first: bool,
                explanations: list, decisions: list[bool]) -> GroupPlan:
    """The ``GroupPlan`` of one group of watched guards (``(index, guard, sources, roots)``
    each): what its sources read, its signature and the manager of its guards, built by
    torch's builder. When they cannot be read together or torch cannot build the manager, its
    guards are kept (their decisions back to True, each explanation saying why) and the plan
    watches nothing."""
    from .. import torch_internals

    out = GroupPlan(graph.global_scope, torch_locals.get("f_code"), traced, free, reads_ambient=first)
    out.sources = [pair for _, _, sources, _ in group for pair in sources]
    try:
        reads = out.read(graph.local_scope)
        if reads is None:
            raise CannotWatch("its sources could not be read together")
        out.reads, out.signature = reads, reads.signature()
        out.manager = torch_internals.build_guard_manager(torch_locals["self"], [g for _, g, _, _ in group],
                                                          torch_locals, lambda rows: [True] * len(rows))
    except Exception as error:  # noqa: BLE001 - torch could not build it: these watches are kept
        why = str(error) if isinstance(error, CannotWatch) else f"the watched guards' manager failed: {error}"
        for i, *_ in group:
            decisions[i] = True
            explanations[i] = dataclasses.replace(explanations[i], checked=why)
        return GroupPlan(graph.global_scope)
    out.guards = len(group)
    return out
