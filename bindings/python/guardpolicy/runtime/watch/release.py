"""When a watch gate lets go of what it holds (docs/design-notes/watch.md, "Lifetimes"). A gate
is an epilogue guard of its cache entry's kept guard manager, which torch holds in C++, where
no collector sees the reference, and which can outlive the entry: torch's
``CheckFunctionManager`` keeps it through the weak-reference finalizers it sets on the objects
it ID_MATCHes, for as long as they live (a class, a function). So an attached gate has a
``Lease`` that ends when its compiled object dies (its ``GroupPlan``'s finalizer) or when
torch drops its cache entry (``torch._dynamo.reset()``, heard by a bell that sits in torch's
compile-callback lists, which ``reset`` clears): the gate drops its states, and torch's
manager is taken from the ``CheckFunctionManager`` at the next safe point (a compile, a reset:
never while torch may be evaluating that manager's guards), so the gate itself is freed."""

from __future__ import annotations

import sys
import weakref
from typing import Any

#: Why a cache entry whose compiled object died is retired (torch's recompile reasons print it).
FREED = "guardpolicy: the compiled object that watched it was freed"

#: ``(owner, manager)`` weak references whose lease ended: torch's manager is taken from its
#: ``CheckFunctionManager`` at the next ``settle`` (never during a call).
_ENDED: list[tuple[Any, Any]] = []
#: The objects whose attached gates end with their cache entries (``Watches``: ``drop_gone``).
_WATCHING: weakref.WeakSet = weakref.WeakSet()
_bell: Any = None  # a weak reference to the bell in torch's compile-callback lists, once rung


class Lease:
    """What ties one attached ``gate`` to torch: its cache entry's kept ``manager`` and torch's
    ``CheckFunctionManager`` ``owner``, both weakly."""

    __slots__ = ("gate", "manager", "owner")

    def __init__(self, gate: Any, manager: Any, owner: Any) -> None:
        self.gate = gate
        self.manager = weakref.ref(manager)
        self.owner = weakref.ref(owner)

    @property
    def entry_gone(self) -> bool:
        """Whether torch dropped the cache entry (``reset()``; its manager replaced)."""
        manager = self.manager()
        return manager is None or getattr(manager, "cache_entry", None) is None

    def end(self, why: str = FREED) -> None:
        """Lets go, once: the gate drops its states (``WatchGate.release``), the cache entry,
        while torch holds it, is retired (never served, out of ``recompile_limit``'s count;
        ``why`` is its reason), and torch's manager is queued to leave its owner (``settle``)."""
        from .. import torch_internals

        gate, self.gate = self.gate, None
        if gate is None:
            return
        gate.release()
        manager = self.manager()
        if (entry := getattr(manager, "cache_entry", None)) is not None:
            torch_internals.retire(entry, why)
        if manager is not None:
            _ENDED.append((self.owner, self.manager))


def settle() -> None:
    """Takes each ended lease's manager from torch's ``CheckFunctionManager``
    (``torch_internals.drop_manager``), which frees it and, with it, the gate: at a compile
    (``Watches.attach``) or a reset, when no guard of it runs."""
    from .. import torch_internals

    while _ENDED:
        owner, manager = _ENDED.pop()
        if (cfm := owner()) is not None and (held := manager()) is not None:
            torch_internals.drop_manager(cfm, held)


def listen(watches: Any) -> None:
    """Ends the leases of ``watches`` (``drop_gone``) whose cache entries a
    ``torch._dynamo.reset()`` dropped; at compile time (``Watches.attach``)."""
    global _bell
    _WATCHING.add(watches)
    if _bell is None or _bell() is None:
        from .. import torch_internals

        bell = _Bell()
        _bell = weakref.ref(bell, _heard_reset)
        torch_internals.on_every_compile(bell)  # held there alone: reset clears the lists


class _Bell:
    """Called at every compile's start and end, to no effect: what matters is its death, when
    ``torch._dynamo.reset()`` clears torch's compile-callback lists."""

    def __call__(self, *_: Any) -> None:
        return None


def _heard_reset(_: Any) -> None:
    if sys.is_finalizing():  # the bell dies with the interpreter too
        return
    for watches in list(_WATCHING):
        watches.drop_gone()
    settle()
