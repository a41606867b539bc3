"""Verify: the guards a policy dropped, kept and re-checked by torch's own guard manager.

At compile time (inside ``guard_filter_fn``) guardpolicy takes the guard manager torch built
with every offered guard (``torch_internals.compiling_frame_locals``) and an index of the
dropped guards (name, guard_type, deciding rule, torch's code parts and source). Once the
compile is done it files them under the kept guard manager the new cache entry holds, in a
``WeakKeyDictionary``: both die with the cache entry (``torch.compiler.reset()``, an
invalidation, the code object's death), and neither references a module or a tensor.

On a sampled call, ``Guards.check`` finds the entry torch would pick (the first whose kept
guards pass on the call's frame locals) and evaluates that entry's full manager; a failure
is a violation: a dropped guard that would have let a stale result through. Which guard
failed comes from torch's guard manager (``check_verbose``: torch stops at the first
failing guard) and its fail-reason helper; the index maps it back to the dropped guard(s)
and the rule that dropped them.

A failure of value guards only (``VALUE_GUARD_TYPES``: a number, string, flag or dict key of
plain Python state; every other dropped guard passes, which the manager of the other dropped
guards, ``FrameGuards.others``, says) is not a violation by itself: the verdict is
``comparable`` and the per-call path runs the call against eager before it counts one
(``call.compared``).
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from typing import Any

from .frames import CompiledFrame
from ..api.policy import RuleRef

#: Guard types on plain Python values (torch's ``GuardBuilder`` methods, as the filter is
#: offered them): a number, string, bool or None compared by value (``EQUALS_MATCH``,
#: ``CONSTANT_MATCH`` and the kinds it dispatches to), a dict's or set's keys
#: (``DICT_CONTAINS``, ``DICT_NOT_CONTAINS``, ``DICT_KEYS_MATCH``, ``SET_CONTAINS``,
#: ``SET_NOT_CONTAINS``) and a sequence's length. When the tensors, shapes, types and identities
#: a compile saw still hold (their guards pass), code compiled for another such value reads no
#: tensor out of bounds: it computes what it computed before, which an eager call tells apart.
#: Never a tensor's, a shape's (``SHAPE_ENV``), a type's or an identity's (``ID_MATCH``,
#: ``TYPE_MATCH``, ``NN_MODULE``, ``CLOSURE_MATCH``).
VALUE_GUARD_TYPES = frozenset({
    "EQUALS_MATCH", "CONSTANT_MATCH", "BOOL_MATCH", "NONE_MATCH", "NOT_NONE_MATCH",
    "DICT_CONTAINS", "DICT_NOT_CONTAINS", "DICT_KEYS_MATCH", "DICT_KEYS", "SET_CONTAINS", "SET_NOT_CONTAINS",
    "SEQUENCE_LENGTH",
})


@dataclasses.dataclass(frozen=True)
class FailedGuard:
    """A dropped guard that failed: its name and guard_type as torch offered them, and the
    rule that dropped it (None: the policy's default)."""

    name: str
    guard_type: str
    rule: RuleRef | None

    def __str__(self) -> str:
        by = f"{self.rule.policy} at {self.rule.file}:{self.rule.line}" if self.rule else "the default"
        return f"`{self.name or '<ambient>'}` ({self.guard_type}), dropped by {by}"

    def to_json(self) -> dict[str, Any]:
        rule = None if self.rule is None else {"policy": self.rule.policy, "file": self.rule.file,
                                               "line": self.rule.line, "column": self.rule.column}
        return {"name": self.name, "guard_type": self.guard_type, "rule": rule}


@dataclasses.dataclass(frozen=True)
class Violation:
    """A call whose inputs fail a guard the policy dropped, on the cache entry torch would
    have served: ``frame`` (the compiled frame), ``call`` (the compiled object's call
    number, 1-based), ``guards`` (the dropped guards that failed; empty when torch's reason
    matched none of them), ``reason`` (torch's text for the failing guard), ``action``
    (``recompile``, ``raise`` or ``warn``), ``rank`` (the rank that saw it, in a
    multi-process run; None otherwise)."""

    frame: CompiledFrame
    call: int
    guards: tuple[FailedGuard, ...]
    reason: str
    action: str
    rank: int | None = None

    def __str__(self) -> str:
        guards = "; ".join(str(g) for g in self.guards) or "a dropped guard guardpolicy could not name"
        rank = f" on rank {self.rank}" if self.rank is not None else ""
        return (f"guardpolicy: stale cache entry of {self.frame} at call {self.call}{rank}: {guards} "
                f"(torch: {self.reason}); on_violation {self.action}")

    def to_json(self) -> dict[str, Any]:
        return {"frame": dataclasses.asdict(self.frame), "call": self.call,
                "guards": [g.to_json() for g in self.guards], "reason": self.reason,
                "action": self.action, "rank": self.rank}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of one sampled call: ``call`` (1-based), ``violations`` (empty: no dropped
    guard failed), ``unverified`` (the entry torch would serve was compiled without verify),
    ``comparable`` (only dropped value guards failed: the violations count only if the call
    differs from an eager call, ``call.compared``). What ``CallPath.agree`` receives and
    returns (a comparable verdict after the comparison: with its violations when the runs
    differ, without when they are equal)."""

    call: int
    violations: tuple[Violation, ...] = ()
    unverified: bool = False  # the entry torch would serve was compiled without verify
    #: Only dropped value guards failed (``VALUE_GUARD_TYPES``): the call is compared with
    #: an eager call before the violations count (``call.compared``).
    comparable: bool = False

    @property
    def stale(self) -> bool:
        return bool(self.violations)


@dataclasses.dataclass(frozen=True)
class _Dropped:
    """One dropped guard: what a violation reports, and how torch's failure text is matched
    to it (its code parts and its source, as torch spells them)."""

    guard: FailedGuard
    code: tuple[str, ...]
    source: str


class DroppedIndex:
    """The guards one compiled frame dropped, in the order torch offered them, and the
    frame. Strings only."""

    __slots__ = ("frame", "dropped")

    def __init__(self, frame: CompiledFrame, dropped: list[_Dropped]):
        self.frame = frame
        self.dropped = dropped

    @classmethod
    def of(cls, entries: list, explanations: list, frame: CompiledFrame) -> "DroppedIndex":
        """From the entries torch offered and the policy's explanation of each."""
        dropped = []
        for entry, exp in zip(entries, explanations):
            if exp.keep:
                continue
            guard = entry.orig_guard
            code = tuple(exp.code.split("\n")) if exp.code else ()  # code_parts on 2.15
            try:
                source = str(guard.name)
            except Exception:  # noqa: BLE001 - a source without a name: matched by type only
                source = ""
            dropped.append(_Dropped(FailedGuard(exp.name, exp.guard_type, exp.rule), code, source))
        return cls(frame, dropped)

    def match(self, parts: list[str], leaves: Any) -> tuple[FailedGuard, ...]:
        """The dropped guards behind torch's failing verbose code parts ``parts``: by code
        part, else by the source of the failing leaf guard (``leaves()``: the full
        manager's ``(code part, source)`` pairs), else by the tensor or the ambient guard
        type torch names."""
        code = [_code(p) for p in parts]
        hits = [d for d in self.dropped if any(c in d.code for c in code)]
        if not hits:
            sources = {src for part, src in leaves() if _code(part) in code}
            hits = [d for d in self.dropped if d.source and d.source in sources]
        if not hits:
            tensors = {m.group(1) for p in parts for m in _TENSOR.finditer(p)}
            hits = [d for d in self.dropped if d.source in tensors and d.guard.guard_type == "TENSOR_MATCH"]
        if not hits:
            kinds = {p.split()[0] for p in parts if p.split()}
            hits = [d for d in self.dropped if not d.guard.name and d.guard.guard_type in kinds]
        seen, out = set(), []
        for d in hits:
            if d.guard not in seen:
                seen.add(d.guard)
                out.append(d.guard)
        return tuple(out)


_TENSOR = re.compile(r"tensor '(.+?)' ")


def _code(part: str) -> str:
    """A verbose code part without torch's trailing ``  # user line`` comment."""
    return part.split("  #", 1)[0].strip()


class FrameGuards:
    """What verify keeps of one compiled frame: torch's guard manager with every offered
    guard (``full``; None in a dry-run, where the entry's own manager has them all), the
    manager of the policy's kept guards (``policy``; a dry-run only), the index of the
    dropped ones and, when the policy dropped value guards and others, the manager of the
    others (``others``: the dropped guards not in ``VALUE_GUARD_TYPES``; None when there are
    none or none of the dropped guards is a value guard)."""

    __slots__ = ("full", "policy", "index", "owner", "others")

    def __init__(self, full: Any, index: DroppedIndex, policy: Any = None, others: Any = None):
        self.full = full
        self.policy = policy
        self.index = index
        self.others = others
        self.owner: Any = None  # a weakref to torch's CheckFunctionManager, once settled

    @classmethod
    def for_verify(cls, entries: list, explanations: list, torch_locals: dict[str, Any], policy: Any,
                   tp: Any) -> "FrameGuards":
        """What verify keeps of the frame being compiled (inside ``guard_filter_fn``):
        torch's full manager (``torch_locals``: ``torch_internals.compiling_frame_locals()``),
        the index of the dropped guards and, where some of them are value guards and some are
        not, the manager of those that are not, built by torch's builder (one more build, at
        compile time only)."""
        index = DroppedIndex.of(entries, explanations, explanations.frame)
        dropped = [(entry, exp) for entry, exp in zip(entries, explanations) if not exp.keep]
        others = [entry.orig_guard for entry, exp in dropped if exp.guard_type not in VALUE_GUARD_TYPES]
        manager = None
        if others and len(others) < len(dropped):
            manager = tp.build_guard_manager(torch_locals["self"], others, torch_locals, policy)
        return cls(torch_locals["guard_manager"], index, others=manager)

    def only_values_fail(self, failed: tuple[FailedGuard, ...], f_locals: dict[str, Any]) -> bool:
        """Whether the dropped guards that fail on ``f_locals`` are value guards only: those
        torch named (``failed``) are, and every other dropped guard passes."""
        if not failed or any(g.guard_type not in VALUE_GUARD_TYPES for g in failed):
            return False
        if self.others is not None:
            return bool(self.others.check(f_locals))
        return all(d.guard.guard_type in VALUE_GUARD_TYPES for d in self.index.dropped)


class Guards:
    """The frames one compiled object compiled, each under torch's cache entry object
    (``_CacheEntry``, weakly: freed with the entry). ``pending``: frames compiled since the
    last ``settle``, with the ``CheckFunctionManager`` whose kept manager points at the
    cache entry once torch's compile is done (held until then only)."""

    def __init__(self):
        self.by_entry: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.pending: list[tuple[Any, FrameGuards]] = []

    def add(self, cfm: Any, frame: FrameGuards) -> None:
        self.pending.append((cfm, frame))

    def settle(self) -> None:
        """Files the pending frames under their cache entries (torch's compile is over; a
        compile that failed after the filter has none, and is dropped)."""
        pending = self.pending  # emptied in place: a CallPath reads this list on every call
        while pending:
            try:
                cfm, frame = pending.pop(0)
            except IndexError:  # another thread filed it
                break
            entry = getattr(getattr(cfm, "guard_manager", None), "cache_entry", None)
            if entry is not None:
                frame.owner = weakref.ref(cfm)
                self.by_entry[entry] = frame

    def get(self, entry: Any) -> FrameGuards | None:
        return self.by_entry.get(entry)

    def forget(self, entry: Any) -> FrameGuards | None:
        """Drops what is kept of ``entry`` (invalidated); returns it."""
        return self.by_entry.pop(entry, None)

    def __len__(self) -> int:
        return len(self.by_entry)


#: What verify keeps, for every compiled object of this process: a cache entry of a code
#: object is shared by every compiled object that calls that code with the same backend
#: (a ``copy.deepcopy`` of a compiled module serves the original's entries), so any of them
#: can check any entry compiled with verify on.
REGISTRY = Guards()


def check(guards: Guards, code: Any, f_locals: dict[str, Any], call: int, action: str,
          tp: Any) -> tuple[Verdict, Any]:
    """Verifies one call: ``(verdict, the cache entry torch would serve or None)``.

    The entry torch would serve is the first cache entry of ``code`` whose kept guards pass
    on ``f_locals``; ``check_entry`` verifies the call against it. An entry whose full
    manager passes is that entry (its kept guards are among the full set) and the call is
    sound, so the kept guards are evaluated only when the full set fails."""
    if guards.pending:
        guards.settle()
    for entry in tp.all_cache_entries(code):
        kept = entry.guard_manager
        if tp.is_deleted(kept):
            continue
        frame = guards.get(entry)
        full = frame.full if frame is not None else None
        if full is not None and full.check(f_locals):
            return Verdict(call), entry
        if not kept.check(f_locals):
            continue
        if full is None:  # compiled without verify: nothing to check
            return Verdict(call, unverified=True), entry
        return _failed(frame, entry, f_locals, call, action, tp), entry
    return Verdict(call), None


def check_entry(guards: Guards, entry: Any, f_locals: dict[str, Any], call: int, action: str,
                tp: Any) -> tuple[Verdict, Any]:
    """Verifies one call against ``entry``, the cache entry torch would serve it (its kept
    guards pass on ``f_locals``): ``(verdict, entry)``. When ``entry`` is one of ``guards``'
    and its full manager fails, the verdict holds the violation."""
    if guards.pending:
        guards.settle()
    frame = guards.get(entry)
    if frame is None or frame.full is None:  # compiled without verify: nothing to check
        return Verdict(call, unverified=True), entry
    if frame.full.check(f_locals):
        return Verdict(call), entry
    return _failed(frame, entry, f_locals, call, action, tp), entry


def _failed(frame: FrameGuards, entry: Any, f_locals: dict[str, Any], call: int, action: str, tp: Any) -> Verdict:
    """The verdict of call ``call``, whose full guard set (``frame.full``) failed while the
    kept guards of ``entry`` pass: one violation, naming the failed dropped guards and torch's
    reason."""
    reason, parts = tp.fail_reason(frame.full, entry.guard_manager, f_locals)
    failed = frame.index.match(parts, lambda: tp.leaf_sources(frame.full))
    return Verdict(call, (Violation(frame.index.frame, call, failed, reason, action),),
                   comparable=frame.only_values_fail(failed, f_locals))
