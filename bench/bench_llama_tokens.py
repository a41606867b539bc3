#!/usr/bin/env python3
"""Tokens per second of a greedy decode loop on a small HF Llama, Inductor, one torch thread.

The loop is ``guardpolicy.tools.decode`` (a 2-layer ``LlamaForCausalLM`` from a config,
random weights, a ``StaticCache`` written in place, one token per call of the decode step).
``gp.suggest`` audits one decode step on Inductor (timed), then one interleaved run
(``guardpolicy.tools.latency.run``) times five loops: eager, ``torch.compile`` (no filter),
torch's recipe (``skip_guard_on_all_nn_modules_unsafe`` + ``install_free_tensors`` + the
``skip_guard_eval_unsafe`` stance, the torch way), the suggested policy with its ``verify every
100 calls``, the same with ``dispatch direct``, and that with every kept guard checked on every
call (its ``default watch`` read as ``default keep``: the safe setting before watching). Every loop's logits equal eager's over its
first steps before timing. Prints a Markdown section for bench/DETAILS.md.

Usage: bench_llama_tokens.py [--calls 600] [--block 20]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time

import torch

from guardpolicy.tools import decode, latency
from guardpolicy.tools.common.timing import machine_description


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600, help="timed decode steps per variant")
    parser.add_argument("--block", type=int, default=20, help="consecutive steps per variant per round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = decode.build_model()
    t0 = time.perf_counter()
    s = decode.suggest(model)
    suggest_s = time.perf_counter() - t0
    audited = [(g.name, g.guard_type) for group in s.audit.groups for g in group.guards]
    guards, dropped = len(audited), sum(1 for g in audited if g in set(s.dropped))
    torch.compiler.reset()
    with torch.no_grad():
        vs = decode.variants(model, s.source, checked=True)
        latency.run(vs, (), args.calls, args.block)
    rows = decode.rows(vs)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("## Tokens per second: a greedy decode loop on a HF Llama (`bench/bench_llama_tokens.py`)\n")
    print(f"Recorded {date}, {machine_description()}, 1 torch thread; {args.calls} timed decode steps "
          f"per variant, interleaved in blocks of {args.block}; Inductor. `gp.suggest` on one decode step took "
          f"{suggest_s:.0f} s and drops {dropped} of {guards} guards. Tokens/s from the block mean "
          "(each block of 20 holds the verified step of `verify every 100 calls` one time in five); the "
          "per-step latency is the median and p90 of single steps.\n")
    print("\n".join(decode.table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
