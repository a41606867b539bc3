"""The frontier ``make demo`` ends with: per demo model, per-call latency against the state
changes each filter still catches.

Per model, on one backend:

1. ``suggest`` (``guardpolicy.tools.suggest``) mutation-audits the model with every guard
   dropped; its **dangerous** changes (``(state, change)`` pairs whose output goes stale
   when nothing guards them) are the state changes that count;
2. each filter (torch's six, as the std policies, and the suggested policy) is
   mutation-audited too; a counted change is **caught** under it unless its audit found
   that change dangerous (the filter dropped every guard that would notice it). ``no
   filter`` drops nothing and so catches all of them (torch itself serves some changes
   stale, e.g. a submodule class's ``forward`` patched after warm-up: the audit, which only
   changes the state a guard reads, does not see those; ``make demo`` counts them too,
   ``guardpolicy.tools.ignored_changes``);
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
from typing import Any, Callable

from ..api.loading import STD_POLICIES, load, load_std
from ..api.policy_text import PolicyText
from ..runtime.logs import tool_objects

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
    missed: list[str] = dataclasses.field(default_factory=list)  # "state: change" not caught (``missed_changes``)
    kind: str = ""  # "torch" (torch.compile's own settings) or "guardpolicy"; "" : by name
    tokens_per_s: float | None = None  # decode loops only
    recommended: bool = False  # the point make demo recommends

    def is_torch(self) -> bool:
        return self.kind == "torch" if self.kind else (self.name == NO_FILTER or self.name in STD_POLICIES)

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


def state_label(group: Any) -> str:
    """A piece of state as a policy names it: the schema field ``path`` of its guards
    (named_modules() spelling, ``blocks.0.fc``, ``global:CONFIG['use_gate']``); Dynamo's source
    name where it has none (a chain through ``type()`` or ``__dict__``, docs/schema.md)."""
    return next((g.path for g in group.guards if g.path), "") or group.name or "<ambient>"


def missed_changes(counted: set[str], audit: Any) -> list[str]:
    """The changes of ``counted`` (``dangerous_changes`` keys) that ``audit`` found dangerous
    too, one per key, each as ``"state: change"`` with the state's ``state_label``; sorted."""
    labels: dict[str, str] = {}
    for g in audit.groups:
        for t in g.trials:
            if t.outcome == "dangerous" and _key(g, t) in counted:
                labels.setdefault(_key(g, t), f"{state_label(g)}: {t.mutation}")
    return sorted(labels.values())


def measure(name: str, model: Any, inputs: tuple, backend: str = "eager", calls: int = 200, block: int = 20,
            progress: Callable[[str], None] = lambda _: None) -> Frontier:
    """The frontier of one model (see the module docstring)."""
    from . import latency, mutation, suggest

    progress(f"frontier {name}: auditing every guard and writing the suggested policy")
    s = suggest.suggest(model, inputs, name=f"suggested_{name}", spec=name, backend=backend, verify=None)
    counted = dangerous_changes(s.audit)
    verified = f"{s.name} + verify"
    filters = ([(std, load_std(std)) for std in STD_POLICIES] + [(s.name, load(s.text))]
               + [(verified, load(with_verify(s.source, VERIFY_EVERY).render()))])
    audits = {}
    for label, policy in filters:
        progress(f"frontier {name}: auditing {label}")
        with tool_objects():  # the audit's compiled objects are the tool's own
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
        missed = missed_changes(counted, audits[label])
        points.append(Point(label, r["median_us"], r["p90_us"], r["vs_no_filter"], len(counted) - len(missed),
                            len(counted), audits[label].dropped, missed))
    return Frontier(name, backend, points, latency.stamp(calls, block))


def with_verify(suggested: PolicyText, every: int) -> PolicyText:
    """The suggested policy as ``<name>_verify`` (its test block too), with the line
    ``verify every <every> calls``."""
    return suggested.with_settings(f"verify every {every} calls", name=f"{suggested.name}_verify")


def _clusters(points: list[Point], eager_us: float | None) -> list[list[int]]:
    """The points' numbers (1-based), grouped where points lie close enough that separate
    numbers would touch (within 4% of the x range and 5% of the y range of the first of a
    group): each group gets one label, ``5,6,8``."""
    width = max([p.median_us for p in points] + [eager_us or 0]) or 1.0
    height = max(max(p.total for p in points), 1)
    groups: list[list[int]] = []
    for i, p in enumerate(points, 1):
        for g in groups:
            q = points[g[0] - 1]
            if abs(q.median_us - p.median_us) < 0.04 * width and abs(q.caught - p.caught) < 0.05 * height:
                g.append(i)
                break
        else:
            groups.append([i])
    return groups


def plot(frontier: Frontier, eager_us: float | None = None) -> bytes:
    """The PNG: one point per filter, per-call median (x, from 0) against state changes
    caught (y). torch's own settings are circles, guardpolicy's policies diamonds, the
    recommended point a large star; points are numbered (one label per cluster of nearby
    points) and named in a legend under the plot, so no label lies on another. ``eager_us``:
    a dotted vertical line at eager's latency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = frontier.points
    n = len(points)
    fig, (ax, legend_ax) = plt.subplots(2, 1, figsize=(8, 4.6 + 0.22 * n),
                                        gridspec_kw={"height_ratios": [4.6, 0.22 * n + 0.2]})
    total = points[0].total
    handles, labels = [], []
    for i, p in enumerate(points, 1):
        torch_side = p.is_torch()
        marker = "*" if p.recommended else ("o" if torch_side else "D")
        color = "#dd8452" if not torch_side else "#4c72b0"
        label = f"{i}. {p.name}: {p.median_us:.0f} µs, {p.caught} of {p.total} caught"
        if p.tokens_per_s:
            label += f", {p.tokens_per_s:.0f} tokens/s"
        if p.recommended:
            label += "  (recommended)"
        handles.append(ax.scatter([p.median_us], [p.caught], s=260 if p.recommended else 70, marker=marker,
                                  color=color, edgecolor="black", linewidth=0.6, zorder=3))
        labels.append(label)
    for group in _clusters(points, eager_us):
        right = max((points[i - 1] for i in group), key=lambda q: q.median_us)  # the label right of them all
        ax.annotate(",".join(map(str, group)), (right.median_us, right.caught), textcoords="offset points",
                    xytext=(9, 6), fontsize=9, zorder=4)
    if eager_us:
        ax.axvline(eager_us, linestyle=":", color="#777777", linewidth=1)
        ax.annotate(f"eager {eager_us:.0f} µs", (eager_us, 0.5 * max(total, 1)), rotation=90, fontsize=8,
                    color="#555555", xytext=(-10, 0), textcoords="offset points", va="center")
    ax.axhline(total, linestyle="--", color="#999999", linewidth=0.8)
    right = max([p.median_us for p in points] + [eager_us or 0])
    ax.set_xlim(0, 1.12 * right)
    ax.set_ylim(-0.08 * max(total, 1), 1.15 * max(total, 1))
    ax.set_xlabel("µs per call (median; left is faster)")
    ax.set_ylabel(f"state changes caught\n(of {total} that go stale unguarded)")
    kinds = ["circles: torch's own settings"]
    if any(not p.is_torch() and not p.recommended for p in points):
        kinds.append("diamonds: guardpolicy")
    if any(p.recommended for p in points):
        kinds.append("star: guardpolicy's recommendation")
    ax.set_title(f"{frontier.model}, {frontier.backend}: latency against state changes caught\n"
                 + "; ".join(kinds), fontsize=10)
    ax.grid(True, alpha=0.3)
    legend_ax.axis("off")
    legend_ax.legend(handles, labels, loc="upper left", fontsize=8, frameon=False, borderaxespad=0)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    plt.close(fig)
    return png.getvalue()


def to_json(frontiers: list[Frontier]) -> str:
    return json.dumps([f.to_dict() for f in frontiers], indent=2, ensure_ascii=False)
