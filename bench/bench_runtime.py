#!/usr/bin/env python3
"""Per-call latency of ``guardpolicy.compile`` against the same settings applied the torch
way, in one interleaved run per model and backend (``guardpolicy.tools.latency`` says how), and
the fixed cost on a trivial compiled function. Prints markdown; ``make bench`` puts it into
bench/RESULTS.md.

Usage: bench_runtime.py [--models mlp,gpt2] [--backends inductor,eager] [--calls 400]
                        [--block 20] [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import sys

import torch

from guardpolicy.tools import latency


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,gpt2")
    ap.add_argument("--backends", default="inductor,eager")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--markdown", help="also write the markdown to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    tables = latency.measure(latency.pair_variants, args.models.split(","), args.backends.split(","),
                             args.calls, args.block, progress)
    trivial = latency.measure_trivial()
    lines = [f"Recorded {latency.stamp(args.calls, args.block)}.", ""]
    for key, rows in tables.items():
        lines += [f"**{key}**", "", *latency.table(rows), ""]
    lines += ["**trivial function (`x + 1`, eager backend): the fixed cost per call**", "",
              *latency.trivial_table(trivial), ""]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
