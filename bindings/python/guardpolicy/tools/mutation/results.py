"""The mutation audit's results: a ``Trial`` per change, a ``GroupResult`` per piece of state
(its verdict per guard type, the values tried), a ``MutationAudit`` per policy and model, and
the text report. Importing this module does not import torch."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any

from .record import RecordedGuard

OUTCOMES = ("dangerous", "caught", "harmless", "not mutated")

LEGEND = ("Per state a policy lets go unguarded, each change the dropped guards would notice: dangerous = no "
          "recompile and the output or the state the call writes (attributes, buffers, dict entries, lists, "
          "globals) differs from eager's (or the stale code raised); caught = a kept guard failed and Dynamo "
          "recompiled; harmless = no recompile and the output and the written state equal eager's; not mutated = "
          "no such change can be made, or eager itself cannot run it (the reason is given). Counts are "
          "dropped guards.")

# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class Trial:
    mutation: str
    outcome: str  # dangerous, caught, harmless, not applied
    detail: str = ""
    guard_types: list = dataclasses.field(default_factory=list)  # the group's types that notice it

    def to_dict(self) -> dict[str, Any]:
        return {"mutation": self.mutation, "outcome": self.outcome, "detail": self.detail,
                "guard_types": self.guard_types}


def _worst(outcomes: Any) -> str:
    outcomes = set(outcomes)
    return next((o for o in ("dangerous", "caught", "harmless") if o in outcomes), "not mutated")


@dataclasses.dataclass
class GroupResult:
    """The guards protecting one piece of state (one source in one frame), the changes
    tried and the verdicts: per guard type, the worst outcome of the changes that type
    notices (dangerous, then caught, then harmless; none applied: not mutated); for the
    group, the worst over its types."""

    name: str
    frame: int
    guards: list[RecordedGuard]
    trials: list[Trial] = dataclasses.field(default_factory=list)
    reasons: list[str] = dataclasses.field(default_factory=list)
    stopped_early: int = 0  # planned changes not tried: every dropped guard was dangerous already
    cut: int = 0  # planned changes not tried: the audit's --budget was spent (the group is kept)
    root: bool = False  # its frame is the call's own (its sources read the call's arguments)

    def tried(self, guard_type: str) -> int:
        """How many values (changes) were applied that a guard of this type notices."""
        return sum(1 for t in self.trials if guard_type in t.guard_types and t.outcome != "not applied")

    @property
    def dropped(self) -> list[RecordedGuard]:
        return [g for g in self.guards if not g.keep]

    def verdict(self, guard_type: str) -> str:
        worst = _worst(t.outcome for t in self.trials if guard_type in t.guard_types)
        return "not mutated" if self.cut and worst == "harmless" else worst  # unfinished: never harmless

    @property
    def outcome(self) -> str:
        return _worst(self.verdict(g.guard_type) for g in self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.name or "<ambient>", "frame": self.frame, "outcome": self.outcome,
                "guards": [{**g.to_dict(), "verdict": self.verdict(g.guard_type),
                            "values_tried": self.tried(g.guard_type)} for g in self.guards],
                "trials": [t.to_dict() for t in self.trials], "reasons": self.reasons,
                "stopped_early": self.stopped_early, "cut_by_budget": self.cut}


@dataclasses.dataclass
class MutationAudit:
    """One policy on one model: every group of guards it drops, classified."""

    model: str
    policy: str
    source: str
    backend: str
    offered: int = 0
    dropped: int = 0
    frames: int = 0
    groups: list[GroupResult] = dataclasses.field(default_factory=list)
    compile_s: float = 0.0
    audit_s: float = 0.0
    recompiles: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)
    state_s: float = 0.0  # snapshotting and restoring the caller's state
    restores: int = 0
    planned: int = 0  # changes planned before the first was tried
    budget_cut: int = 0  # of them, not tried: the --budget was spent

    def guard_counts(self) -> dict[str, int]:
        """Dropped guards per verdict."""
        c = Counter(grp.verdict(g.guard_type) for grp in self.groups for g in grp.dropped)
        return {o: c[o] for o in OUTCOMES}

    def guards_with(self, verdict: str) -> list[tuple[GroupResult, RecordedGuard]]:
        """``(group, guard)`` for every dropped guard with that verdict."""
        return [(grp, g) for grp in self.groups for g in grp.dropped if grp.verdict(g.guard_type) == verdict]

    def by_outcome(self, outcome: str) -> list[GroupResult]:
        return [g for g in self.groups if g.outcome == outcome]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "policy": self.policy, "source": self.source, "backend": self.backend,
                "guards_offered": self.offered, "guards_dropped": self.dropped, "frames": self.frames,
                "dropped_guards_by_outcome": self.guard_counts(), "compile_s": round(self.compile_s, 3),
                "audit_s": round(self.audit_s, 3), "recompiles": self.recompiles, "problems": self.problems,
                "state_s": round(self.state_s, 3), "restores": self.restores, "changes_planned": self.planned,
                "changes_cut_by_budget": self.budget_cut,
                "groups": [g.to_dict() for g in self.groups]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def table(self, limit: int | None = None) -> str:
        return format_audit(self, limit)

    def __str__(self) -> str:
        return self.table()


def format_audit(a: MutationAudit, limit: int | None = None) -> str:
    """The text report of one policy: counts, then the dangerous groups (state, guards with
    the rule that dropped each, the change and what differed), then the caught ones and the
    reasons of the not mutated ones."""
    counts = a.guard_counts()
    lines = [f"== {a.model} · {a.policy} · {a.backend}: {a.offered} guards offered in {a.frames} frame(s), "
             f"{a.dropped} dropped, in {sum(1 for g in a.groups if g.dropped)} states; compile {a.compile_s:.1f} s, "
             f"mutations {a.audit_s:.1f} s ({a.recompiles} recompiles; restoring the model {a.state_s:.2f} s "
             f"over {a.restores} restores)",
             "   dropped guards: " + " · ".join(f"{o} {counts[o]}" for o in OUTCOMES)]
    for outcome in ("dangerous", "caught", "not mutated"):
        groups = a.by_outcome(outcome)
        if not groups:
            continue
        lines.append(f"   {outcome} ({len(groups)} states):")
        shown = groups if limit is None else groups[:limit]
        for g in shown:
            guards = ", ".join(f"{d.guard_type} ({g.verdict(d.guard_type)}, {g.tried(d.guard_type)} values) "
                               f"dropped by {d.rule}" for d in g.dropped)
            lines.append(f"     {g.name or '<ambient>'}: {guards}")
            for t in g.trials:
                if outcome != "not mutated" and t.outcome == outcome:
                    lines.append(f"       {t.mutation}: {t.detail or t.outcome}")
            if outcome == "not mutated":
                why = g.reasons or [f"{t.mutation}: {t.detail}" for t in g.trials]
                lines.append("       " + "; ".join(why))
        if limit is not None and len(groups) > limit:
            lines.append(f"     … {len(groups) - limit} more")
    for p in a.problems:
        lines.append(f"   ✗ {p}")
    return "\n".join(lines)
