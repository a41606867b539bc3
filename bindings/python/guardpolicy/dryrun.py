"""Dry-run: every guard kept, what the policy would drop recorded, and each later recompile
that the policy would have turned into a stale result attributed to the rule responsible.

At each compile (inside ``guard_filter_fn``) the filter returns keep for every guard, and
guardpolicy builds, with torch's own builder, the guard manager the policy *would* have
left (its kept guards only), filed under the new cache entry. When the same frame compiles
again, a guard of an existing entry failed: for the first entry (in torch's order) whose
policy manager still passes on the frame's locals, the policy would have served that
entry's code; torch's guard manager names the failing guard, which the policy would have
dropped, and the rule that would have dropped it. Nothing is added to a call.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
from collections import Counter
from typing import Any

from .frames import CompiledFrame
from .verify import FailedGuard

log = logging.getLogger("guardpolicy")


@dataclasses.dataclass(frozen=True)
class DryRunEvent:
    """A recompile the policy would have turned into a stale result: ``frame`` (the cache
    entry the policy would have served), ``recompile`` (the compile it caused, with its
    compile id), ``guards`` (the failed guards the policy would have dropped, with their
    rules), ``reason`` (torch's text for the failing guard)."""

    frame: CompiledFrame
    recompile: CompiledFrame
    guards: tuple[FailedGuard, ...]
    reason: str

    def __str__(self) -> str:
        rules = [g.rule for g in self.guards if g.rule is not None]
        where = f"{rules[0].file}:{rules[0].line}" if rules else "the policy's default"
        guards = ", ".join(f"`{g.name or '<ambient>'}`, {g.guard_type}" for g in self.guards) or self.reason
        return (f"recompile {self.recompile.compile_id} of {self.recompile.function}: this call would have "
                f"served a stale result under {where} (guard {guards}; entry {self.frame.compile_id}; "
                f"torch: {self.reason})")

    def to_json(self) -> dict[str, Any]:
        return {"frame": dataclasses.asdict(self.frame), "recompile": dataclasses.asdict(self.recompile),
                "guards": [g.to_json() for g in self.guards], "reason": self.reason}


def attribute(guards: Any, torch_locals: dict[str, Any], recompile: CompiledFrame, tp: Any) -> DryRunEvent | None:
    """For a compile in progress: the event when it is a recompile that the policy would
    have served stale instead (see the module docstring), else None."""
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
            failed = frame.index.match(parts, lambda: tp.leaf_sources(full))
            return DryRunEvent(frame.index.frame, recompile, failed, reason)
    return None


class DryRunReport:
    """What a dry-run saw so far: per compiled frame the guards the policy would drop (per
    rule), and the events. ``to_text()``, ``to_json()``."""

    def __init__(self, stats: Any):
        self.policy = stats.policy.name
        self.events: list[DryRunEvent] = list(stats.dry_run_events)
        self.frames = []
        for frame in stats.explanations:
            rules = Counter(f"{e.rule.file}:{e.rule.line}" if e.rule else "default" for e in frame if not e.keep)
            self.frames.append({"frame": dataclasses.asdict(frame.frame), "offered": len(frame),
                                "would_drop": sum(rules.values()), "by_rule": dict(rules)})

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "frames": self.frames, "events": [e.to_json() for e in self.events]}

    def to_text(self) -> str:
        lines = [f"guardpolicy dry-run of policy `{self.policy}`: {len(self.frames)} frame(s) compiled, "
                 f"{len(self.events)} recompile(s) the policy would have served stale"]
        for f in self.frames:
            fr = f["frame"]
            rules = ", ".join(f"{n} by {r}" for r, n in f["by_rule"].items()) or "none"
            lines.append(f"  {fr['function']} [{fr['compile_id']}]: {f['would_drop']} of {f['offered']} "
                         f"guards would be dropped ({rules})")
        lines += [f"  ! {e}" for e in self.events]
        return "\n".join(lines)


def report(compiled: Any) -> DryRunReport:
    """The dry-run report of what ``guardpolicy.compile(..., dry_run=...)`` returned.
    Raises TypeError for anything else, ValueError when it was not compiled with dry_run."""
    from .runtime import stats

    st = stats(compiled)
    if not st.dry_run:
        raise ValueError("guardpolicy.dry_run_report(): this object was compiled without dry_run")
    return DryRunReport(st)


def report_at_exit(stats: Any, path: str | os.PathLike) -> None:
    """At interpreter exit: the report's text logged (``guardpolicy`` logger, INFO) and its
    JSON written to ``path`` (atomically; refused paths are logged, not raised)."""

    def write() -> None:
        from ._files import write_file

        rep = DryRunReport(stats)
        log.info("%s", rep.to_text())
        try:
            write_file(os.fspath(path), json.dumps(rep.to_json(), indent=2) + "\n")
        except OSError as e:
            log.error("guardpolicy dry-run: cannot write the report to %s: %s", path, e)

    atexit.register(write)
