"""The audit's results: a ``Cell`` per (policy, change), a ``PolicyAudit`` per policy and
model, their JSON (``to_json``) and text or Markdown tables (``format_policy_table``,
``format_matrix``), and the soundness findings (``soundness_findings``)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from .changes import CHANGES

#: Outcomes, in the order the summary counts them.
OUTCOMES = ("recompiled", "unaffected", "stale", "error", "n/a")

#: How a ``recompiled`` cell's detail starts when the recompiled code is wrong (raised, or
#: differs from eager): ``soundness_findings`` reports those as guardpolicy bugs.
RECOMPILED_WRONG = "but the recompiled code"


@dataclasses.dataclass
class Cell:
    """The outcome of one change under one policy."""

    change: str
    outcome: str  # one of OUTCOMES
    detail: str = ""  # what differs, the error, or why n/a
    guards: list = dataclasses.field(default_factory=list)  # related dropped guards: {name, guard_type}
    dropped_types: dict = dataclasses.field(default_factory=dict)  # stale without related guards: type -> count
    control: str | None = None  # stale/error cells: the outcome with no guard_filter_fn at all
    verify: dict | None = None  # with --verify N: {"every", "caught", "after_calls", "output_ok"}

    def to_json(self) -> dict:
        out = {"outcome": self.outcome, "detail": self.detail}
        if self.verify is not None:
            out["verify"] = self.verify
        if self.outcome in ("stale", "error"):
            out["dropped_guards"] = self.guards
            if not self.guards:
                out["dropped_guard_types"] = self.dropped_types
        if self.control is not None:
            out["control_no_filter"] = self.control
        return out


@dataclasses.dataclass
class PolicyAudit:
    """Every change under one policy, on one model."""

    model: str
    policy: str
    source: str  # std name, "keep_all" or the file
    unsafe: bool
    offered: int = 0  # guards offered at the first compile (summed over frames)
    dropped: int = 0  # of which the policy dropped
    frames: int = 0  # frames compiled by the first call
    cells: list = dataclasses.field(default_factory=list)
    settings: list = dataclasses.field(default_factory=list)  # the policy's config and stance lines

    def counts(self) -> dict[str, int]:
        c = Counter(cell.outcome for cell in self.cells)
        return {o: c[o] for o in OUTCOMES if c[o]}

    def to_json(self) -> dict:
        return {
            "policy": self.policy,
            "source": self.source,
            "unsafe": self.unsafe,
            "guards_offered": self.offered,
            "guards_dropped": self.dropped,
            "frames": self.frames,
            "settings": self.settings,
            "outcomes": self.counts(),
            "changes": {cell.change: cell.to_json() for cell in self.cells},
        }


def torch_own(cell: Cell) -> bool:
    """A stale/error cell that is just as stale/failing with no guard_filter_fn: torch does
    not guard this change at all (no policy could have kept a guard for it)."""
    return cell.control is not None and cell.control.split(" ", 1)[0] == cell.outcome


def _cell_text(cell: Cell, limit: int = 3) -> str:
    """The note of a cell: for stale/error, the dropped guards that let it through (or the
    guard types dropped), what differed, and whether torch alone is stale too."""
    if cell.outcome not in ("stale", "error"):
        return cell.detail
    if cell.guards:
        named = [f"{g['name'] or '<ambient>'} ({g['guard_type']})" for g in cell.guards]
        more = f" +{len(named) - limit} more" if len(named) > limit else ""
        text = "dropped " + ", ".join(named[:limit]) + more
    elif cell.dropped_types:
        types = [f"{t}×{n}" for t, n in cell.dropped_types.items()]
        more = f" +{len(types) - 4} more types" if len(types) > 4 else ""
        text = "no related guard; dropped " + ", ".join(types[:4]) + more
    else:
        text = "nothing dropped"
    text += f"; {cell.detail}"
    if cell.verify is not None:
        v = cell.verify
        if v["caught"]:
            text += (f"; verify={v['every']}: caught after {v['after_calls']} call(s)"
                     + ("" if v["output_ok"] else ", but the recompiled output differs from eager's"))
        else:
            text += f"; verify={v['every']}: not caught"
    if torch_own(cell):
        text += "; † just as " + cell.outcome + " with no guard_filter_fn (torch does not guard it)"
    elif cell.control is not None and not cell.control.startswith("recompiled"):
        text += f"; with no guard_filter_fn: {cell.control}"
    return text


def format_policy_table(pa: PolicyAudit, markdown: bool = False) -> str:
    """One policy's table: change, outcome, and for stale/error cells the dropped guards
    that let it through and what differed."""
    what = {c.key: c.what for c in CHANGES}
    head = (f"{pa.model} · {pa.policy} ({'unsafe' if pa.unsafe else 'safe'}): {pa.offered} guards offered "
            f"in {pa.frames} frame(s), {pa.dropped} dropped")
    if pa.settings:
        head += " · " + "; ".join(pa.settings)
    if markdown:
        lines = [f"#### {head}", "", "| change | outcome | dropped guard(s) that let it through / note |",
                 "|---|---|---|"]
        for cell in pa.cells:
            note = _cell_text(cell).replace("|", "\\|")
            outcome = f"**{cell.outcome}**{'†' if torch_own(cell) else ''}" if cell.outcome in ("stale", "error") \
                else cell.outcome
            lines.append(f"| `{cell.change}`: {what.get(cell.change, '')} | {outcome} | {note} |")
        return "\n".join(lines)
    w = max((len(c.change) for c in pa.cells), default=6)
    lines = [f"== {head}", f"  {'change':<{w}}  {'outcome':<11}  dropped guard(s) that let it through / note"]
    for cell in pa.cells:
        outcome = cell.outcome + ("†" if torch_own(cell) else "")
        lines.append(f"  {cell.change:<{w}}  {outcome:<11}  {_cell_text(cell)}".rstrip())
    return "\n".join(lines)


_ABBREV = {"recompiled": "recompiled", "unaffected": "ok", "stale": "STALE", "error": "ERROR", "n/a": "n/a"}


def _matrix_cell(cell: Cell | None) -> str:
    if cell is None:
        return ""
    text = _ABBREV[cell.outcome] + ("†" if torch_own(cell) else "")
    if cell.verify is not None:
        text += f" ✓{cell.verify['after_calls']}" if cell.verify["caught"] else " ✗"
    return text


def format_matrix(audits: list[PolicyAudit], markdown: bool = False) -> str:
    """Changes × policies for one model: ``recompiled``, ``ok`` (unaffected), ``STALE``,
    ``ERROR`` or ``n/a``; ``†``: just as stale with no guard_filter_fn."""
    if not audits:
        return ""
    keys = [c.change for c in audits[0].cells]
    by = [{c.change: c for c in pa.cells} for pa in audits]
    names = [pa.policy for pa in audits]
    if markdown:
        lines = ["| change | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
        for k in keys:
            cells = [_matrix_cell(b.get(k)) for b in by]
            cells = [f"**{c}**" if c.startswith(("STALE", "ERROR")) else c for c in cells]
            lines.append(f"| `{k}` | " + " | ".join(cells) + " |")
        return "\n".join(lines)
    w = max(len(k) for k in keys)
    cols = [max(len(n), 10) for n in names]
    lines = [f"  {'change':<{w}}  " + "  ".join(f"{n:<{c}}" for n, c in zip(names, cols))]
    for k in keys:
        lines.append(f"  {k:<{w}}  " + "  ".join(f"{_matrix_cell(b.get(k)):<{c}}" for b, c in zip(by, cols)))
    return "\n".join(line.rstrip() for line in lines)


LEGEND = ("recompiled = a kept guard caught the change; ok = unaffected (no recompile, output equals "
          "eager's); STALE = no recompile and the output differs from eager's (silent wrong result); "
          "ERROR = no recompile and the stale code raised; † = just as stale with no guard_filter_fn "
          "at all (torch does not guard this change)")
VERIFY_LEGEND = ("with --verify N: ✓k = gp.compile(verify=N, on_violation=recompile) caught the change "
                 "k calls after it (and that call returned eager's output); ✗ = verify did not catch it")



def soundness_findings(results: dict[str, list[PolicyAudit]]) -> tuple[list[str], list[str]]:
    """``(bugs, torch_gaps)``: stale/error cells under a policy that dropped no guard; a
    *bug* when torch without a filter gets it right (guardpolicy's fault), a *torch gap*
    when torch without a filter is just as wrong."""
    bugs, gaps = [], []
    for model_name, audits in results.items():
        for pa in audits:
            if pa.dropped:
                continue
            for cell in pa.cells:
                if cell.outcome in ("stale", "error"):
                    line = f"{model_name} · {pa.policy} · {cell.change}: {cell.outcome}: {_cell_text(cell)}"
                    (gaps if torch_own(cell) else bugs).append(line)
                elif cell.detail.startswith(RECOMPILED_WRONG):
                    bugs.append(f"{model_name} · {pa.policy} · {cell.change}: recompiled, {cell.detail}")
    return bugs, gaps
