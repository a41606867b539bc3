#!/usr/bin/env python3
"""Per-call latency of ``guardpolicy.compile`` against the same settings applied the torch
way, in one interleaved run per model and backend (``guardpolicy.tools.latency`` says how), and
the fixed cost on a trivial compiled function. Prints markdown; ``make bench`` puts it into
bench/DETAILS.md.

Usage: bench_runtime.py [--models mlp,gpt2] [--backends inductor,eager] [--calls 400] [--copies 2]
                        [--block 20] [--markdown OUT.md] [--recovery]

``--recovery``: instead, the per-call cost of the recommended recipe after the stance recovered
from a call no cache entry accepted, against before and against the torch way holding the same
cache entries (``guardpolicy.tools.recovery_latency``), in its own section of DETAILS.md.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import torch
from results_section import (add_copies, check_blocks, met, md_head, md_row, percall_tables, pooled_from, recipe,
                             run_parser, worst_twin_ratio, write_section)

from guardpolicy.tools import latency, recovery_latency

BEGIN = "<!-- runtime: begin (bench/bench_runtime.py writes this section) -->"
END = "<!-- runtime: end -->"
RATIO_TARGET = 1.02  # gp.compile / the torch way, median of the run
FIXED_COST_TARGET_US = 1.0  # per call, on x + 1, over torch.compile
TRIVIAL_CALLS, TRIVIAL_BLOCK = 4000, 200  # latency.measure_trivial's timed calls per variant and block


def recorded(data: dict) -> str:
    """The intro's last two lines: when, where, how many calls (pooled from how many builds), blocks."""
    return (f"Recorded {data['date']} on {data['machine']};\n{data['calls']} timed calls per variant"
            f"{pooled_from(data['copies'])}, interleaved in blocks of {data['block']}.")


def trivial_table(rows: list[dict]) -> list[str]:
    """The trivial function's table: medians and p90 to 0.01 µs, the difference from the torch way."""
    lines = md_head(["variant", "median (µs/call)", "p90 (µs/call)", "difference vs torch way (µs/call)"])
    for r in rows:
        diff = f"{r['minus_torch_way_us']:+.2f}" if r["minus_torch_way_us"] is not None else ""
        lines.append(md_row([r["variant"], f"{r['median_us']:.2f}", f"{r['p90_us']:.2f}", diff], blank="  |"))
    return lines


def render(data: dict) -> str:
    """The runtime section of DETAILS.md from one run: ``data`` holds date, machine, calls,
    block, copies, ``tables`` (per ``"model, backend"``, ``latency.measure``'s rows),
    ``trivial`` (``latency.measure_trivial``'s rows), trivial_calls and trivial_block."""
    key, variant, ratio = worst_twin_ratio(data["tables"])
    fixed = max(r["minus_torch_way_us"] for r in data["trivial"] if r["minus_torch_way_us"] is not None)
    return "\n".join([
        BEGIN,
        "## gp.compile against the torch way, per call (`bench/bench_runtime.py`)",
        "",
        "µs per call of a model compiled by `gp.compile(model, policy)` against the same settings applied the",
        "torch way (torch's filter function, config knob and stance), per recipe, on the backend each table names.",
        recorded(data),
        "",
        *percall_tables(data["tables"], "torch way"),
        f"**trivial function (`x + 1`, eager backend): the fixed cost per call** ({data['trivial_calls']} timed "
        f"calls per variant, blocks of {data['trivial_block']})",
        "",
        *trivial_table(data["trivial"]),
        "",
        f"Targets: every gp.compile variant at most {RATIO_TARGET}× its torch way: **{met(ratio <= RATIO_TARGET)}** "
        f"(largest {ratio:.3f}, {recipe(variant)} on {key}); the fixed cost on a trivial function at most "
        f"{FIXED_COST_TARGET_US:.0f} µs per call: **{met(fixed <= FIXED_COST_TARGET_US)}** (largest {fixed:+.2f} µs).",
        END,
        "",
    ])


RECOVERY_BEGIN = "<!-- runtime-recovery: begin (bench/bench_runtime.py --recovery writes this section) -->"
RECOVERY_END = "<!-- runtime-recovery: end -->"


def recovery_verdict(tables: dict[str, list[dict]]) -> str:
    """Per table, met or not (every gp.compile row against its torch way); then gp.compile
    after a recovery over before, per table (named by its backend when one model ran)."""
    per = []
    for key, rows in tables.items():
        twin = max(r["vs_torch_way"] for r in rows if r["vs_torch_way"] is not None)
        per.append(f"**{met(twin <= RATIO_TARGET)}** on {key} (largest {twin:.3f})")
    one_model = len({key.split(", ", 1)[0] for key in tables}) == 1
    after = [f"{recovery_latency.after_over_before(rows):.3f}× ({key.split(', ', 1)[-1] if one_model else key})"
             for key, rows in tables.items()]
    return (f"Target: every gp.compile row at most {RATIO_TARGET}× its torch way: {', '.join(per)}; "
            f"gp.compile after a recovery vs before: {', '.join(after)}.")


def render_recovery(data: dict) -> str:
    """The runtime-recovery section of DETAILS.md from one ``--recovery`` run: ``data`` holds
    date, machine, calls, block, copies and ``tables`` (``latency.measure``'s rows of
    ``recovery_latency.recovery_variants``)."""
    return "\n".join([
        RECOVERY_BEGIN,
        "## Per call after the stance recovered (`bench/bench_runtime.py --recovery`)",
        "",
        "µs per call of the recommended recipe (nn-module guards dropped, free tensors, the stance) through "
        "`gp.compile`",
        "and the torch way, `before` (one cache entry) and after one call that no entry accepts (`gp.compile` "
        "recovers",
        "and compiles a second entry; torch's twin recompiles), on the backend each table names, `dynamic=False`.",
        recorded(data),
        "",
        *percall_tables(data["tables"], "torch way"),
        recovery_verdict(data["tables"]),
        RECOVERY_END,
        "",
    ])


def run_data(args, tables: dict) -> dict:
    """What ``render`` and ``render_recovery`` take of a run besides its ``tables``."""
    return {"date": datetime.date.today().isoformat(), "machine": latency.machine(), "calls": args.calls,
            "block": args.block, "copies": args.copies, "tables": tables}


def main_recovery(args) -> int:
    tables = latency.measure(recovery_latency.recovery_variants, args.models.split(","), args.backends.split(","),
                             args.calls, args.block, lambda msg: print(msg, file=sys.stderr, flush=True),
                             args.copies)
    text = render_recovery(run_data(args, tables))
    print(text)
    if args.results:
        write_section(Path(args.results), RECOVERY_BEGIN, RECOVERY_END, text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    add_copies(ap)
    ap.add_argument("--markdown", help="also write the section's markdown to this file")
    ap.add_argument("--results", help="the DETAILS.md whose runtime section to write")
    ap.add_argument("--recovery", action="store_true",
                    help="measure the per-call cost after the stance recovered instead (see above)")
    args = ap.parse_args(argv)
    check_blocks(ap, args)
    torch.set_num_threads(1)
    if args.recovery:
        return main_recovery(args)
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    tables = latency.measure(latency.pair_variants, args.models.split(","), args.backends.split(","),
                             args.calls, args.block, progress, args.copies)
    data = {**run_data(args, tables), "trivial": latency.measure_trivial(TRIVIAL_CALLS, TRIVIAL_BLOCK),
            "trivial_calls": TRIVIAL_CALLS, "trivial_block": TRIVIAL_BLOCK}
    text = render(data)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    if args.results:
        write_section(Path(args.results), BEGIN, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
