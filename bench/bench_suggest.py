#!/usr/bin/env python3
"""Per-call latency of the policy ``python -m guardpolicy suggest`` writes, against no filter
and against ``skip_guard_on_all_nn_modules``, on the demo models, per backend.

Per model and backend: ``guardpolicy.tools.suggest.suggest`` mutation-audits the model on that
backend (every guard dropped, each one's state changed the way it notices) and renders the
policy that drops only the harmless guards; then one interleaved run
(``guardpolicy.tools.latency.measure_model``) times eager, ``torch.compile`` with no filter,
and ``skip_guard_on_all_nn_modules`` and the suggested policy through ``gp.compile``.
Prints markdown; ``--results bench/DETAILS.md`` writes its section there.

Usage: bench_suggest.py [--models mlp,gpt2] [--backends inductor,eager] [--calls 400]
                        [--block 20] [--results bench/DETAILS.md]
"""

from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path

import torch
from results_section import percall_table, run_parser, split_machine, write_section

from guardpolicy.api import loading
from guardpolicy.tools.common import models as _models
from guardpolicy.tools import latency
from guardpolicy.tools.suggest import command as suggest

BEGIN = "<!-- suggest: begin (bench/bench_suggest.py writes this section) -->"
END = "<!-- suggest: end -->"
NN_MODULES = "skip_guard_on_all_nn_modules"


def measure(name: str, backend: str, calls: int, block: int, progress) -> dict:
    """One model and backend: the suggested policy's audit (its name, guards dropped of those
    offered, the audit's guard counts by outcome, its seconds) and the timed ``rows``."""
    model, inputs = _models.build(name)
    progress(f"{name}, {backend}: mutation audit")
    t0 = time.perf_counter()
    s = suggest.suggest(model, inputs, name=f"suggested_{name}", spec=name, backend=backend)
    audit_s = time.perf_counter() - t0
    policy = loading.load(s.text)
    progress(f"{name}, {backend}: timing")
    rows = latency.measure_model(model, inputs, {}, [loading.load_std(NN_MODULES), policy], backend, calls, block)
    return {"key": f"{name}, {backend}", "policy": f"suggested_{name}", "dropped": len(s.dropped),
            "offered": s.audit.offered, "counts": dict(s.audit.guard_counts()), "audit_s": audit_s, "rows": rows}


def heading(run: dict) -> str:
    """A table's heading: model and backend, then what the suggested policy drops and the audit's counts."""
    counts = ", ".join(f"{outcome} {n}" for outcome, n in run["counts"].items())
    return (f"**{run['key']}**: {run['policy']} drops {run['dropped']} of {run['offered']} guards (audit: {counts}; "
            f"{run['audit_s']:.0f} s)")


def render(data: dict) -> str:
    """The suggest section of DETAILS.md from one run: ``data`` holds date, machine, calls,
    block and ``runs`` (``measure``'s dicts, one per model and backend)."""
    head, tail = split_machine(data["machine"], 2)  # the line breaks before its last two parts
    outcomes = ", ".join(data["runs"][0]["counts"]) if data["runs"] else ""
    calls = f"{data['calls']} timed calls per variant, interleaved in blocks of {data['block']}. Each table's heading"
    recorded = f"(both policies through `gp.compile`). Recorded {data['date']} on {head}"
    lines = [
        BEGIN,
        "## The suggested policy, per call (`bench/bench_suggest.py`)",
        "",
        "µs per call of the policy `python -m guardpolicy suggest` writes (its audit run on the backend each table "
        "names;",
        f"only guards found harmless dropped) against `torch.compile` with no filter and `{NN_MODULES}`",
        *([f"{recorded},", f"{tail}; {calls}"] if tail else [f"{recorded};", calls]),
        f"gives the audit's counts of guards: {outcomes}, and the time it took.",
        "",
    ]
    for run in data["runs"]:
        lines += [heading(run), "", *percall_table(run["rows"]), ""]
    return "\n".join(lines + ["Verdict: information only, no current target.", END, ""])


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    ap.add_argument("--results", help="the DETAILS.md whose suggest section to write")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    runs = [measure(name, backend, args.calls, args.block, progress)
            for name in args.models.split(",") for backend in args.backends.split(",")]
    text = render({"date": datetime.date.today().isoformat(), "machine": latency.machine(), "calls": args.calls,
                   "block": args.block, "runs": runs})
    print(text)
    if args.results:
        write_section(Path(args.results), BEGIN, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
