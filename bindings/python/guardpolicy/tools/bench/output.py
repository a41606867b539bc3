"""The bench command's output: the aligned text table per model (``format_table``), its
legend, one JSON row per variant (``row_json``) and the PNG bar chart (``write_plot``)."""

from __future__ import annotations

import io
from typing import Any

from ...api.files import write_file
from ..common.compare import TOLERANCE
from .rows import BASELINE, VIA_EAGER, VIA_GP, VIA_TORCH, Row


def _fmt(value, spec: str = "d") -> str:
    return "-" if value is None else format(value, spec)


def _tree_cell(v: Row) -> str:
    if v.tree_guards is None:
        return "-"
    if v.uses_diff_tree and v.run_tree_guards is not None:
        return f"{v.tree_guards}>{v.run_tree_guards}"
    return str(v.tree_guards)


def format_table(rows: list[Row], header: str) -> str:
    """The aligned text table for one model: ``header``, then one line per row (counts in
    guards, times in µs, ratios of medians)."""
    cols = ["variant", "via", "offered", "kept", "tree", "guard µs", "warm µs",
            "median µs", "p90 µs", "vs base", "vs eager", "ok"]
    body = []
    for v in rows:
        body.append([
            v.name, v.via, _fmt(v.offered), _fmt(v.kept), _tree_cell(v),
            _fmt(v.guard_eval_us, ".1f"), _fmt(v.guard_check_us, ".2f"),
            _fmt(v.median_us, ".1f"), _fmt(v.p90_us, ".1f"),
            _fmt(v.vs_baseline, ".2f") + "x", _fmt(v.vs_eager, ".2f") + "x",
            "ref" if not v.compiled else ("✓" if v.matches_eager and not v.problems else "✗"),
        ])
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(cols)]

    def line(cells):
        out = [cells[0].ljust(widths[0]), cells[1].ljust(widths[1])]
        out += [c.rjust(w) for c, w in zip(cells[2:], widths[2:])]
        return "  ".join(out).rstrip()

    lines = [header, line(cols), line(["-" * w for w in widths])]
    lines += [line(r) for r in body]
    return "\n".join(lines)


LEGEND = (
    "offered/kept: guards the filter saw and kept, summed over compiled frames (no filter: Dynamo's "
    "pre-filter count); tree: guards in the final guard-manager tree(s), full>diff for the stance "
    "rows (diff: what skip_guard_eval_unsafe runs); guard µs: torch's profile_guard_manager, one "
    "check after evicting the caches (median); warm µs: root.check back to back (best of 15 ~1 ms samples); median/p90 µs: per call; vs: median "
    "ratios; +ift: install_free_tensors=True; gp.compile rows include its per-call config.patch / "
    "set_stance wrapper, (torch) rows set them once around the timed calls; ok: ✓ when every timed "
    f"call's output equals eager's within {TOLERANCE} (tools/common/compare.py)."
)

_REPORTED = (
    "name", "via", "kind", "source", "config", "stance_after", "frames", "offered", "kept", "dropped",
    "tree_guards", "run_tree_guards", "guard_eval_us", "guard_check_us", "compile_s", "median_us",
    "p90_us", "vs_baseline", "vs_eager", "matches_eager", "problems",
)


def row_json(v: Row) -> dict[str, Any]:
    """One row for ``--json``: every number of the table plus frames, config and compile s."""
    row = {k: getattr(v, k) for k in _REPORTED}
    row["config"] = dict(v.config)
    row["problems"] = list(v.problems)
    row["compiled"] = v.compiled
    return row


def write_plot(path: str, report: dict[str, Any]) -> None:
    """A PNG bar chart: per model, the median per-call µs of every variant (bar) and its
    p90 (tick), with the baseline's median as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = report["models"]
    heights = [max(3.0, 0.28 * len(rows) + 1.2) for rows in models.values()]
    fig, axes = plt.subplots(len(models), 1, figsize=(11, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    colors = {VIA_EAGER: "#999999", VIA_TORCH: "#4c72b0", VIA_GP: "#dd8452"}
    for ax, (model, rows) in zip(axes[:, 0], models.items()):
        names = [r["name"] for r in rows]
        y = list(range(len(rows)))
        ax.barh(y, [r["median_us"] for r in rows], color=[colors.get(r["via"], "#55a868") for r in rows])
        ax.scatter([r["p90_us"] for r in rows], y, marker="|", color="black", s=80, zorder=3, label="p90")
        base = next(r["median_us"] for r in rows if r["name"] == BASELINE)
        ax.axvline(base, linestyle="--", color="black", linewidth=0.8, label="no filter median")
        ax.set_yticks(y, names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("µs per call (median; tick: p90)")
        ax.set_title(f"{model}: {report['calls']} calls per variant, torch {report['torch']}", fontsize=9)
        handles = [matplotlib.patches.Patch(color=c, label=k) for k, c in colors.items()]
        ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    plt.close(fig)
    write_file(path, png.getvalue())


