"""The recheck of one group of watched guards (``Recheck``): what a ``WatchGate`` calls when a
call's roots have no armed, unchanged state (docs/design-notes/watch.md, "Per call"). It
evaluates the group's watched guards with torch's manager of them and compares the
compile's signature, builds a new state where one is due, and sends a group rechecked call
after call hot (``watch.hot``). ``frame`` below is the group's ``watch.GroupPlan``."""

from __future__ import annotations

import weakref
from typing import Any

from ..logs import log
from .hot import HOT_AFTER
from .reads import Reads, deref, signature_change, weakly
from .roots import is_module

#: Rechecks back ``Recheck`` remembers a group's root objects: one that comes back keeps a state.
RECENT_ROOTS = 16


class Recheck:
    """What a gate calls when a call's roots have no armed, unchanged state: returns
    ``(verdict, new state, None or False)`` (False: drop the given state, which holds objects
    that moved). The verdict: the watched guards (torch's manager of them)
    pass on the frame locals, and the hooks and classes the compiled code inlined are the
    compile's (Dynamo inlines a hook or a method with no guard of its own). A new state is built
    when what the given one holds moved (an object replaced, a class swapped, a function's code),
    for a module at a root that has none (a second instance), and for another object at a root
    (a KV cache of a new request, a hook object of one of many layers) when the same one came
    on one of the last ``RECENT_ROOTS`` rechecks (an object made anew on every call never does). It holds its
    ``GroupPlan`` weakly (a cache entry must not keep a model alive): once the plan is gone, the
    entry is not served again."""

    __slots__ = ("frame", "recent")

    def __init__(self, frame: Any):
        self.frame = weakref.ref(frame)
        self.recent: tuple = ()  # (the other objects at the roots, held weakly only) of recent rechecks

    def __call__(self, f_locals: dict, state: Any) -> tuple[bool, Any]:
        frame = self.frame()
        if frame is None or frame.manager is None:
            return False, None
        say(frame, None)  # a failure below names itself; a pass leaves no older failure's text
        try:
            reads = state.info if state is not None else None
            in_place = reads is not None and not state.stale()  # only its dicts' contents changed
            # rechecked call after call: hot; with installed tensors only where a state holds them
            if (frame.may_go_hot or in_place) and (stretch := frame.hot.stretch(frame.gate.calls)):
                if frame.hot.calls == 1:
                    log.info("guardpolicy watch: %s rechecked on %d calls in a row: torch's manager checks its "
                             "%d watched guards on every call until it holds still", frame.label, HOT_AFTER,
                             frame.guards)
                frame.gate.go_hot(frame.manager.check, stretch - 1, not frame.may_go_hot)
                if frame.may_go_hot:
                    return _passes(frame, f_locals), (False if reads is not None else None)
            if in_place:
                return _passes(frame, f_locals) and self._holds(frame, reads), None
            adopted = False
            if not _passes(frame, f_locals):
                # a state is armed failing only for objects that come back (the hooks of many
                # layers taking turns at one compiled wrapper, each but one failing this entry);
                # otherwise nothing to arm and no walk (torch asks every entry again for its
                # recompile reasons); a state whose objects moved is dropped, not kept failing
                # with the old ones in it
                if state is not None or not self._adopt(_root_objects(frame, f_locals)):
                    return False, (False if reads is not None else None)
                adopted = True
            reads = frame.read(f_locals)
            if reads is None:
                return False, None
            if state is None and not adopted and not self._adopt(tuple(map(deref, reads.roots.values()))):
                return self._holds(frame, reads), None  # nothing to arm: this check stands
            fresh = frame.state(reads)
            # checked again after the walk: the new state is armed on what was read before this check
            ok = _passes(frame, f_locals) and self._holds(frame, reads)
            if fresh is not None and fresh.stale():  # moved while it was built: the next call reads again
                fresh = None
            return ok, fresh
        except Exception:  # noqa: BLE001 - a guard that cannot be evaluated fails: torch compiles anew
            return False, None

    @staticmethod
    def _holds(frame: Any, reads: Reads) -> bool:
        """Whether ``reads`` has the compile's signature (the hooks and classes the compiled
        code inlined), a move of the installed tensors noted first (``note_tensors``)."""
        signature = reads.signature()
        frame.note_tensors(reads, signature)
        if signature == frame.signature:
            return True
        say(frame, signature_change(frame.signature, signature))
        return False

    def _adopt(self, roots: tuple | None) -> bool:
        """Whether to keep a state for the objects at the roots (None: not known): modules at
        once, other objects when the same ones (alive: not new ones at reused addresses) came on
        one of the last ``RECENT_ROOTS`` rechecks. The last one's objects are remembered as they
        are, older ones only when all are held weakly (a tuple of a past request's cache tensors
        is not kept)."""
        if roots is None:
            return False
        now = tuple(obj for obj in roots if not is_module(obj))
        if not now:
            return True
        seen = any(len(held) == len(now) and all(deref(r) is o for r, o in zip(held, now)) for held, _ in self.recent)
        held = tuple(weakly(o, None) for o in now)
        older = tuple(entry for entry in self.recent if entry[1])[:RECENT_ROOTS - 1]
        self.recent = ((held, all(h is not o for h, o in zip(held, now))), *older)
        return seen


def _root_objects(frame: Any, f_locals: dict) -> tuple | None:
    """The objects at the compile's roots of ``frame`` in ``f_locals`` (a local, or an item of
    its ``*args`` tuple or ``**kwargs`` dict), without a walk; None when one is not there."""
    compiled = frame.reads
    if compiled is None:
        return None
    objects = []
    for name, path in compiled.roots:
        obj = f_locals.get(name)
        try:
            for key in path:
                obj = obj[key]
        except (KeyError, IndexError, TypeError):
            return None
        objects.append(obj)
    return tuple(objects)


def _passes(frame: Any, f_locals: dict) -> bool:
    """Whether the group's watched guards pass on ``f_locals`` (torch's manager of them); a
    failure names its guard (``say``)."""
    if frame.manager.check(f_locals):
        return True
    from .. import torch_internals  # at run time: `import guardpolicy` imports no torch

    say(frame, f"a watched guard failed: {torch_internals.failing_guard(frame.manager, f_locals)}")
    return False


def say(frame: Any, why: str | None) -> None:
    """Names what failed the group's last recheck (``why``; None: nothing) in the text of its
    gate's guard, which torch's recompile reasons print (``TORCH_LOGS=recompiles``,
    ``recompile_reason``, the recompile-limit warning): ``guardpolicy watch: 59 watched guards,
    50 dicts: a hook changed (_forward_hooks of 2)``."""
    if frame.reason is not None:
        frame.reason[0] = frame.reason_text if why is None else f"{frame.reason_text}: {why}"

