#!/usr/bin/env python3
"""Per-call latency of the policy ``python -m guardpolicy suggest`` writes, against no filter
and against ``skip_guard_on_all_nn_modules``, on the demo models, per backend.

Per model and backend: ``guardpolicy.tools.suggest.suggest`` mutation-audits the model on that
backend (every guard dropped, each one's state changed the way it notices) and renders the
policy that drops only the harmless guards; then one interleaved run
(``guardpolicy.tools.latency.measure_model``) times eager, ``torch.compile`` with no filter,
and ``skip_guard_on_all_nn_modules`` and the suggested policy through ``gp.compile``.
Prints markdown; ``--results bench/RESULTS.md`` writes its section there.

Usage: bench_suggest.py [--models mlp,gpt2] [--backends inductor,eager] [--calls 400]
                        [--block 20] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from results_section import run_parser, write_section

from guardpolicy import loading
from guardpolicy.tools import _models, latency, suggest

BEGIN = "<!-- suggest: begin (bench/bench_suggest.py writes this section) -->"
END = "<!-- suggest: end -->"
NN_MODULES = "skip_guard_on_all_nn_modules"


def measure(name: str, backend: str, calls: int, block: int, progress) -> tuple[list[dict], str]:
    """The rows for one model and backend, and a line on what the suggested policy drops."""
    model, inputs = _models.build(name)
    progress(f"{name}, {backend}: mutation audit")
    t0 = time.perf_counter()
    s = suggest.suggest(model, inputs, name=f"suggested_{name}", spec=name, backend=backend)
    audit_s = time.perf_counter() - t0
    policy = loading.load(s.text)
    progress(f"{name}, {backend}: timing")
    rows = latency.measure_model(model, inputs, {}, [loading.load_std(NN_MODULES), policy], backend, calls, block)
    counts = s.audit.guard_counts()
    note = (f"suggested_{name} drops {len(s.dropped)} of {s.audit.offered} guards (audit: "
            + ", ".join(f"{o} {n}" for o, n in counts.items()) + f"; {audit_s:.0f} s)")
    return rows, note


def section(text: str) -> str:
    return "\n".join([
        BEGIN,
        "## The suggested policy per call (`bench/bench_suggest.py`)",
        "",
        "Per demo model and backend: the policy `python -m guardpolicy suggest` writes (the mutation",
        "audit run on that backend; only guards found harmless dropped) against `torch.compile` with no",
        "filter and against `skip_guard_on_all_nn_modules` (both policies through `gp.compile`), in one",
        "interleaved run (`guardpolicy.tools.latency`).",
        "",
        text.rstrip("\n"),
        END,
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    ap.add_argument("--results", help="the RESULTS.md whose suggest section to write")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    lines = [f"Recorded {latency.stamp(args.calls, args.block)}.", ""]
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            rows, note = measure(name, backend, args.calls, args.block, progress)
            lines += [f"**{name}, {backend}**: {note}", "", *latency.table(rows, twins=False), ""]
    text = "\n".join(lines)
    print(text)
    if args.results:
        write_section(Path(args.results), BEGIN, END, section(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
