#!/usr/bin/env python3
"""The suggested policy on a HF Llama decode step, Inductor, one torch thread.

The model is tests/python/models/llama_model.py (a 2-layer ``LlamaForCausalLM`` from a
config, random weights, a ``StaticCache`` prefilled with a 3-token prompt, one greedy decode
step per call). ``gp.suggest`` audits it on Inductor (timed), then one interleaved run
(``guardpolicy.tools.latency``) times: no filter; the suggested policy with every kept guard
checked per call (its ``default watch`` as ``default keep``, + verify + direct dispatch: the
safe setting before watching); the suggested policy (``default watch``) with verify off; as
written (``verify every 100 calls``); the same with ``dispatch direct``;
torch's zero-guard floor (``skip_all_guards`` + free tensors + the ``skip_guard_eval_unsafe``
stance). Each timed call first rewinds the cache's write position (``rewound``), in every
variant alike. Prints a Markdown section for bench/DETAILS.md.

Usage: bench_llama_suggest.py [--calls 400] [--block 20]
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from pathlib import Path

import torch

import guardpolicy as gp
from guardpolicy.tools.common import model_spec as _model_spec
from guardpolicy.tools import latency
from guardpolicy.tools.decode import cache_keyword
from guardpolicy.tools.common.timing import machine_description

ROOT = Path(__file__).resolve().parents[1]


def rewound(fn, cache, length: int):
    """``fn`` called with the cache's write position put back to ``length`` first (a
    ``StaticLayer`` advances its ``cumulative_length`` tensor on every call): every timed call
    is the same decode step. The rewind is the same few µs in every variant."""
    def call(**kwargs):
        for layer in cache.layers:
            layer.cumulative_length.fill_(length)
        return fn(**kwargs)

    return call


def variants(model, kwargs: dict, text: str) -> list:
    no_verify = re.sub(r"^  verify every \d+ calls\n", "", text, flags=re.M)
    direct = re.sub(r"^  default ", "  dispatch direct\n  default ", text, count=1, flags=re.M)
    checked = direct.replace("  default watch", "  default keep")  # every kept guard checked per call
    cache = kwargs[cache_keyword(model)]
    length = int(cache.layers[0].cumulative_length)
    out = [latency.Variant("eager", rewound(model, cache, length))]
    fn = rewound(torch.compile(latency.own_copy(model)), cache, length)
    fn(**kwargs)
    out.append(latency.Variant("no filter", fn))
    floor = latency.RECIPES[-1]
    for label, source in (("suggested, watch as keep + verify + direct", checked),
                          ("suggested, verify off", no_verify), ("suggested + verify every 100", text),
                          ("suggested + verify + direct dispatch", direct),
                          ("zero-guard floor (all +ift +stance)", floor.policy_source())):
        fn = rewound(gp.compile(latency.own_copy(model), gp.load(source)), cache, length)  # inductor
        fn(**kwargs)
        out.append(latency.Variant(label, fn))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--block", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    b = _model_spec.resolve(str(ROOT / "tests/python/models/llama_model.py")).build()
    t0 = time.perf_counter()
    s = gp.suggest(b.fn, *b.args, backend="inductor", **b.kwargs)
    suggest_s = time.perf_counter() - t0
    dropped = sum(1 for f in s.findings if f["decision"] == "drop")
    with torch.no_grad():
        vs = variants(b.fn, b.kwargs, s.text)
        latency.run(vs, (), args.calls, args.block, b.kwargs)
    rows = latency.summarize(vs)
    floor = next(r["median_us"] for r in rows if r["variant"].startswith("zero-guard"))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("## The suggested policy on a HF Llama decode step (`bench/bench_llama_suggest.py`)\n")
    print(f"Recorded {date}, {machine_description()}, 1 torch thread; {args.calls} timed calls per "
          f"variant, interleaved in blocks of {args.block}; Inductor. `gp.suggest(..., backend=\"inductor\")` took "
          f"{suggest_s:.0f} s and drops {dropped} of {len(s.findings)} guards.\n")
    print("| variant | median µs | p90 µs | / no filter | / zero-guard floor |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['median_us']:.1f} | {r['p90_us']:.1f} | {r['vs_no_filter']:.2f} | "
              f"{r['median_us'] / floor:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
