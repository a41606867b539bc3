"""Dry-run: every guard kept, what the policy would drop recorded, and each later recompile
that the policy would have skipped attributed to the rule responsible.

At each compile (inside ``guard_filter_fn``) the filter returns keep for every guard, and
guardpolicy builds, with torch's own builder, the guard manager the policy *would* have
left (its kept guards only), filed under the new cache entry. When the same frame compiles
again, a guard of an existing entry failed: for the first entry (in torch's order) whose
policy manager still passes on the frame's locals, the policy would have served that
entry's code; torch's guard manager names the failing guard, which the policy would have
dropped, and the rule that would have dropped it. Nothing is added to a call.

Whether that entry's code would have served a stale result depends on the guard: code
compiled for another tensor, shape, type or identity would (``known_stale``); code compiled
for another value of a plain Python number, string, flag or dict key (``verify.
VALUE_GUARD_TYPES``) computes the same when the compiled code does not use the value (a run
id read by a dead branch), which only running it tells: the event says the policy would
have skipped the recompile, and verify compares such calls with eager (docs/verify.md).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
from collections import Counter
from typing import Any

from ..distributed.fingerprint import ranks_text
from .frames import CompiledFrame
from .logs import log  # the one guardpolicy logger (TORCH_LOGS=guardpolicy)
from .stats import stats as stats_of
from .verify import VALUE_GUARD_TYPES, FailedGuard


@dataclasses.dataclass(frozen=True)
class DryRunEvent:
    """A recompile the policy would have skipped, serving an older cache entry instead:
    ``frame`` (the cache entry the policy would have served), ``recompile`` (the compile it
    caused, with its compile id), ``guards`` (the failed guards the policy would have
    dropped, with their rules), ``reason`` (torch's text for the failing guard), ``rank``
    (the rank it happened on, in a multi-process run; None otherwise). ``known_stale``: a
    failed guard is not a value guard (``verify.VALUE_GUARD_TYPES``), so that entry's code
    was compiled for another tensor, shape, type or identity and would have served a stale
    result; False when only value guards failed, whose code may compute the same."""

    frame: CompiledFrame
    recompile: CompiledFrame
    guards: tuple[FailedGuard, ...]
    reason: str
    rank: int | None = None

    @property
    def known_stale(self) -> bool:
        return not self.guards or any(g.guard_type not in VALUE_GUARD_TYPES for g in self.guards)

    def __str__(self) -> str:
        rules = [g.rule for g in self.guards if g.rule is not None]
        where = f"{rules[0].file}:{rules[0].line}" if rules else "the policy's default"
        guards = ", ".join(f"`{g.name or '<ambient>'}`, {g.guard_type}" for g in self.guards) or self.reason
        rank = f" on rank {self.rank}" if self.rank is not None else ""
        what = ("this call would have served a stale result" if self.known_stale else
                "a dropped guard failed: the policy would have skipped this recompile")
        value = "" if self.known_stale else " (a value guard: stale only if the code uses the value)"
        return (f"recompile {self.recompile.compile_id} of {self.recompile.function}{rank}: {what} under {where} "
                f"(guard {guards}{value}; entry {self.frame.compile_id}; torch: {self.reason})")

    def to_json(self) -> dict[str, Any]:
        return {"frame": dataclasses.asdict(self.frame), "recompile": dataclasses.asdict(self.recompile),
                "guards": [g.to_json() for g in self.guards], "reason": self.reason, "rank": self.rank,
                "known_stale": self.known_stale}


def attribute(guards: Any, torch_locals: dict[str, Any], recompile: CompiledFrame, tp: Any,
              rank: int | None = None) -> DryRunEvent | None:
    """For a compile in progress: the event when it is a recompile that the policy would
    have served stale instead (see the module docstring), tagged with ``rank``, else None."""
    output_graph = torch_locals["output_graph"]
    scope = getattr(output_graph, "local_scope", None)
    code = torch_locals["f_code"]
    if scope is None or code is None:
        return None
    if guards.pending:
        guards.settle()
    with tp.torch_function_enabled():  # torch builds guards with torch function disabled
        for entry in tp.all_cache_entries(code):
            full = entry.guard_manager
            frame = guards.get(entry)
            if frame is None or frame.policy is None or not frame.policy.check(scope):
                continue  # not ours, or the policy would have recompiled too
            if full.check(scope):
                return None  # torch would have served this entry: not a guard failure
            reason, parts = tp.fail_reason(full, full, scope)
            failed = frame.index.match(parts, lambda: tp.leaf_sources(full))  # noqa: B023 - called before the return
            return DryRunEvent(frame.index.frame, recompile, failed, reason, rank)
    return None


class DryRunReport:
    """What a dry-run saw so far: per compiled frame the guards the policy would drop (per
    rule), and the events. ``ranks``: the ranks whose frames and events it holds (each
    frame and event says its ``rank``); empty in one process. ``to_text()``, ``to_json()``."""

    def __init__(self, stats: Any, rank: int | None = None):
        self.policy = stats.policy.name
        self.ranks: tuple[int, ...] = () if rank is None else (rank,)
        self.events: list[DryRunEvent] = list(stats.dry_run_events)
        self.frames = []
        for frame in stats.explanations:
            rules = Counter(f"{e.rule.file}:{e.rule.line}" if e.rule else "default" for e in frame if not e.keep)
            self.frames.append({"frame": dataclasses.asdict(frame.frame), "offered": len(frame),
                                "would_drop": sum(rules.values()), "by_rule": dict(rules), "rank": rank})

    @classmethod
    def merged(cls, reports: list[DryRunReport]) -> DryRunReport:
        """One report of every rank's (``reports`` in rank order): their frames and events,
        each still tagged with its rank."""
        out = cls.__new__(cls)
        out.policy = reports[0].policy
        out.ranks = tuple(r for rep in reports for r in rep.ranks)
        out.frames = [f for rep in reports for f in rep.frames]
        out.events = [e for rep in reports for e in rep.events]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "ranks": list(self.ranks), "frames": self.frames,
                "events": [e.to_json() for e in self.events]}

    def to_text(self) -> str:
        on = f" on {ranks_text(list(self.ranks))}" if self.ranks else ""
        stale = sum(e.known_stale for e in self.events)
        lines = [f"guardpolicy dry-run of policy `{self.policy}`{on}: {len(self.frames)} frame(s) compiled, "
                 f"{len(self.events)} recompile(s) the policy would have skipped ({stale} known stale)"]
        for f in self.frames:
            fr = f["frame"]
            rules = ", ".join(f"{n} by {r}" for r, n in f["by_rule"].items()) or "none"
            rank = f"rank {f['rank']}: " if f["rank"] is not None else ""
            lines.append(f"  {rank}{fr['function']} [{fr['compile_id']}]: {f['would_drop']} of {f['offered']} "
                         f"guards would be dropped ({rules})")
        lines += [f"  ! {e}" for e in self.events]
        return "\n".join(lines)


def report(compiled: Any, gather: bool = True) -> DryRunReport:
    """The dry-run report of what ``guardpolicy.compile(..., dry_run=...)`` returned. When
    the object agrees over a ``torch.distributed`` group, it is a collective (every rank of
    the group calls it; ``rank_timeout`` bounds the wait) and every rank's report holds all
    ranks' frames and events, rank 0's included; ``gather=False``: this rank's only, no
    collective. Raises TypeError for anything else, ValueError when it was not compiled
    with dry_run, ``RankMismatchError`` when a rank does not come."""
    st = stats_of(compiled)
    if not st.dry_run:
        raise ValueError("guardpolicy.dry_run_report(): this object was compiled without dry_run")
    group = st.ranks.report_group()
    own = DryRunReport(st, None if group is None else group.rank)
    if group is None or not gather:
        return own
    return DryRunReport.merged(st.ranks.gather(own, "the dry-run reports", group))


def report_at_exit(stats: Any, path: str | os.PathLike) -> None:
    """At interpreter exit: the report's text logged (``guardpolicy`` logger, INFO) and its
    JSON written to ``path`` (atomically; refused paths are logged, not raised). On a rank
    of a group (``torch.distributed``), this rank's report goes to ``path`` with the rank in
    its name (``rank_path``): no collective runs at exit."""

    def write() -> None:
        from ..api.files import write_file

        rank = stats.ranks.rank_at_exit()
        rep = DryRunReport(stats, rank)
        target = rank_path(path, rank)
        log.info("%s", rep.to_text())
        try:
            write_file(target, json.dumps(rep.to_json(), indent=2) + "\n")
        except OSError as e:
            log.error("guardpolicy dry-run: cannot write the report to %s: %s", target, e)

    atexit.register(write)


def rank_path(path: str | os.PathLike, rank: int | None) -> str:
    """``path``, or for ``rank`` N the same with ``.rankN`` before its suffix
    (``dry.json`` -> ``dry.rank1.json``)."""
    path = os.fspath(path)
    if rank is None:
        return path
    head, tail = os.path.split(path)
    stem, dot, suffix = tail.rpartition(".")
    name = f"{stem}.rank{rank}.{suffix}" if dot and stem else f"{tail}.rank{rank}"
    return os.path.join(head, name)
