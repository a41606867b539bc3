"""What ``python -m guardpolicy recompiles`` prints: the storms as a table, then before and
after the fix."""

from __future__ import annotations

from typing import Any


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _tail(text: str, width: int) -> str:
    """The end of a long value, where ids made per call differ."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _calls(calls: int) -> str:
    return f" in {calls} calls" if calls else ""


def _outcome(label: str, o: Any, calls: int) -> str:
    fallback = "fell back to eager" if o.eager_fallback else "no eager fallback"
    checked = ("outputs not compared (a live object)" if o.wrong < 0 else
               f"{o.wrong} wrong outputs, {o.wrong_state} wrong states")
    return (f"  {label}: {o.compiles} compiles{_calls(calls)}, {fallback}, {checked}"
            + (f" ({o.first_difference})" if o.first_difference else ""))


def table(report: Any, out_path: str | None = None) -> str:
    """A ``command.RecompilesReport`` as text: one row per storm (guard, type, failures, verdict), each verdict's
    line or advice under it, then the loop before and after the fix."""
    if not report.storms:
        lines = [f"no recompile storm{_calls(report.calls)}: no guard failed in two cache entries"]
        if report.before is not None:
            lines.append(_outcome("watch_state", report.before, report.calls))
        return "\n".join(lines)
    rows = [("guard", "guard_type", "failures", "verdict")]
    rows += [(_cut(s.guard, 48), s.guard_type or "-", str(s.failures), s.verdict) for s in report.storms]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"{len(report.storms)} storming guards{_calls(report.calls)} (failures: over every cache entry "
             f"of every recompile)"]
    for i, row in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(w) if j != 2 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i:
            s = report.storms[i - 1]
            lines.append(f"      {s.line}" if s.line else f"      {s.advice}")
            if s.values:
                lines.append(f"      compiled for: {', '.join(_tail(v, 24) for v in s.values)}")
    if report.before is not None:
        lines.append(_outcome("so far" if report.live else "before, watch_state", report.before, report.calls))
    if report.after is not None:
        lines.append(_outcome("after, the fix", report.after, report.calls))
        verdict = ("proven: outputs and state equal eager's on every call, the storms its lines fix gone"
                   if report.proven else "NOT proven: " + (report.after.first_difference or "see above"))
        lines.append(f"  {verdict}" + (f"; wrote {out_path}" if out_path and report.proven else ""))
    if report.live:
        lines.append("  `python -m guardpolicy recompiles --model ... --run ...` runs the loop and proves a fix")
    elif report.unfixed:
        lines.append(f"  {len(report.unfixed)} storms no policy line fixes: see the advice above")
    return "\n".join(lines)
