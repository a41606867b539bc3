"""The frontier ``make demo`` ends with: per demo model, per-call latency against the state
changes each filter still catches.

Per model, on one backend:

1. ``suggest`` (``guardpolicy.tools.suggest``) mutation-audits the model with every guard
   dropped; its **dangerous** changes (``(state, change)`` pairs whose output goes stale
   when nothing guards them) are the state changes that count;
2. each filter (torch's six, as the std policies, and the suggested policy) is
   mutation-audited too; a counted change is **caught** under it unless its audit found
   that change dangerous (the filter dropped every guard that would notice it). ``no
   filter`` drops nothing and so catches all of them (torch itself ignores some, e.g.
   hooks added after compiling with ``skip_nnmodule_hook_guards``: the audit, which only
   changes what a filter drops, does not count those);
3. the suggested policy with verify mode (its text with ``verify every N calls``,
   docs/verify.md) is one more point: timed with ``N`` = ``VERIFY_EVERY``, and audited
   with ``verify=1, on_violation="recompile"`` (``mutation.audit(verify=1)``), so a change is
   caught there when a kept guard or verify's check of the dropped ones notices it on the
   first sampled call (with every N calls, at most N calls late);
4. one interleaved timing (``guardpolicy.tools.latency.measure_model``): eager,
   ``torch.compile`` with no filter, and each filter through ``gp.compile``.

The result is a table and, per model, a PNG: latency (x) against changes caught (y).
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from typing import Any, Callable

from ..loading import STD_POLICIES, load, load_std

NO_FILTER = "no filter"

#: The sampling of the frontier's verify point: every VERIFY_EVERY-th call is verified.
VERIFY_EVERY = 100

#: Said after the frontier: how its verify point was measured.
VERIFY_NOTE = (f"`+ verify`: the suggested policy with `verify every {VERIFY_EVERY} calls` (docs/verify.md), "
               "timed as such; its changes caught are those a kept guard or verify's re-check of the dropped "
               f"guards notices (audited with verify=1: with every {VERIFY_EVERY} calls, a change is caught "
               f"at most {VERIFY_EVERY} calls late).")


@dataclasses.dataclass
class Point:
    """One filter on one model: per-call latency and the changes it catches."""

    name: str
    median_us: float
    p90_us: float
    vs_no_filter: float
    caught: int
    total: int
    dropped: int  # guards the filter dropped
    missed: list[str] = dataclasses.field(default_factory=list)  # "state: change" not caught

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Frontier:
    model: str
    backend: str
    points: list[Point]
    stamp: str

    def table(self) -> list[str]:
        lines = [f"{self.model}, {self.backend} backend ({self.stamp}):", "",
                 "| filter | median µs | p90 µs | / no filter | state changes caught | guards dropped |",
                 "|---|---:|---:|---:|---:|---:|"]
        for p in self.points:
            lines.append(f"| {p.name} | {p.median_us:.1f} | {p.p90_us:.1f} | {p.vs_no_filter:.2f} | "
                         f"{p.caught} of {p.total} | {p.dropped} |")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "backend": self.backend, "stamp": self.stamp,
                "points": [p.to_dict() for p in self.points]}


def _key(group: Any, trial: Any) -> str:
    return f"{group.name}: {trial.mutation}"


def dangerous_changes(audit: Any) -> set[str]:
    return {_key(g, t) for g in audit.groups for t in g.trials if t.outcome == "dangerous"}


def measure(name: str, model: Any, inputs: tuple, backend: str = "eager", calls: int = 200, block: int = 20,
            progress: Callable[[str], None] = lambda _: None) -> Frontier:
    """The frontier of one model (see the module docstring)."""
    from . import latency, mutation, suggest

    progress(f"frontier {name}: auditing every guard and writing the suggested policy")
    s = suggest.suggest(model, inputs, name=f"suggested_{name}", spec=name, backend=backend)
    counted = dangerous_changes(s.audit)
    verified = f"{s.name} + verify"
    filters = ([(std, load_std(std)) for std in STD_POLICIES] + [(s.name, load(s.text))]
               + [(verified, load(with_verify(s.text, s.name, VERIFY_EVERY)))])
    audits = {}
    for label, policy in filters:
        progress(f"frontier {name}: auditing {label}")
        audits[label] = mutation.audit(model, inputs, None, policy, label=name, backend=backend,
                                       verify=1 if label == verified else None)
    progress(f"frontier {name}: timing")
    rows = latency.measure_model(model, inputs, {}, [p for _, p in filters], backend, calls, block)
    by_variant = {r["variant"]: r for r in rows}
    points = []
    base = by_variant[NO_FILTER]
    points.append(Point(NO_FILTER, base["median_us"], base["p90_us"], 1.0, len(counted), len(counted), 0))
    for label, policy in filters:
        r = by_variant[f"{policy.name} (gp.compile)"]
        missed = sorted(counted & dangerous_changes(audits[label]))
        points.append(Point(label, r["median_us"], r["p90_us"], r["vs_no_filter"], len(counted) - len(missed),
                            len(counted), audits[label].dropped, missed))
    return Frontier(name, backend, points, latency.stamp(calls, block))


def with_verify(text: str, name: str, every: int) -> str:
    """The policy ``text`` (a suggested policy named ``name``) as ``<name>_verify``, with the
    line ``verify every <every> calls`` before its ``default`` and its test block renamed
    to match."""
    out = re.sub(rf"^((?:unsafe )?policy) {re.escape(name)} \{{", rf"\1 {name}_verify {{", text, count=1, flags=re.M)
    out = re.sub(rf"^test {re.escape(name)} \{{", f"test {name}_verify {{", out, count=1, flags=re.M)
    out = re.sub(r"^(  default )", rf"  verify every {every} calls\n\1", out, count=1, flags=re.M)
    if out.count("verify every") != 1 or f"{name}_verify {{" not in out:
        raise ValueError(f"with_verify: the suggested policy {name!r} does not have the expected shape")
    return out


def plot(frontier: Frontier) -> bytes:
    """The PNG: one point per filter, per-call median (x) against state changes caught (y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for p in frontier.points:
        suggested = p.name.startswith("suggested")
        color = "#dd8452" if suggested else ("#333333" if p.name == NO_FILTER else "#4c72b0")
        ax.scatter([p.median_us], [p.caught], s=90 if suggested else 50, color=color, zorder=3)
        below = p.name.endswith("+ verify")  # beside the suggested point, at the same height
        ax.annotate(p.name, (p.median_us, p.caught), textcoords="offset points", xytext=(6, -12 if below else 4),
                    fontsize=8)
    total = frontier.points[0].total
    ax.axhline(total, linestyle="--", color="#999999", linewidth=0.8)
    ax.set_xlabel("µs per call (median)")
    ax.set_ylabel(f"state changes caught (of {total} that go stale unguarded)")
    ax.set_ylim(-0.05 * max(total, 1), 1.1 * max(total, 1))
    ax.set_title(f"{frontier.model}, {frontier.backend} backend: latency against changes caught", fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    plt.close(fig)
    return png.getvalue()


def to_json(frontiers: list[Frontier]) -> str:
    return json.dumps([f.to_dict() for f in frontiers], indent=2, ensure_ascii=False)
