#!/usr/bin/env python3
"""Per-call cost against depth: a narrow HF Llama decode step (tests/python/models/llama_model.py,
width 64, a StaticCache, one token per call) at 2, 36 and 82 layers, Inductor, one thread.

Variants, each compiled from its own copy of the model: no filter; torch with recursive dict
tags (``use_recursive_dict_tags_for_guards=True`` around the compile and the calls, where this
torch has the knob); torch's recipe the torch way (``skip_guard_on_all_nn_modules_unsafe``,
``install_free_tensors``, the ``skip_guard_eval_unsafe`` stance); the zero-guard floor the torch
way and through ``gp.compile``; and the safe setting, ``gp.compile(model, "watch_state")``, and
the policy ``gp.suggest`` writes for the 2-layer model (Inductor audit; its rules name layers by
``layers.*``, so it applies at every depth; ``verify every 100 calls``, ``default watch``, free
tensors) with ``dispatch direct``.
Instructions per call under callgrind (bench/callgrind.py; what decides on this machine) and
wall clock in one interleaved run (``guardpolicy.tools.latency``). Prints markdown;
``--results bench/DETAILS.md`` writes its section there.

Usage: bench_depth.py [--layers 2,36,82] [--calls 300] [--block 20] [--instructions 100]
                      [--results bench/DETAILS.md]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from bench_llama_suggest import rewound
from bench_watch import decode_text, text_file
from results_section import counted_parser, publish, recorded

import callgrind
import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools import latency
from guardpolicy.tools.decode import cache_keyword

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/python/models"))
import llama_model  # noqa: E402

BEGIN = "<!-- depth: begin (bench/bench_depth.py writes this section) -->"
END = "<!-- depth: end -->"
WIDTH = 64
NO_FILTER = "no filter"
DICT_TAGS = "torch, recursive dict tags"
RECIPE = "torch's recipe (nn modules +ift +stance)"
FLOOR_TORCH = "zero-guard floor, the torch way"
FLOOR = "zero-guard floor (gp.compile)"
SAFE = "watch_state (gp.compile)"
SUGGESTED = "suggested (2-layer audit) + verify + direct"
TARGET = 1.05  # the safe setting at most this times the better of the floor and torch's recipe
KNOB = "use_recursive_dict_tags_for_guards"


def dict_tags() -> object:
    return torch_internals.config_patch(**{KNOB: True})


def depth_variants(layers: int | str, suggested: str):
    """The ``make`` of ``callgrind``: the model and inputs it is given are ignored; each
    variant's call is one decode step of the ``layers``-layer model, the cache rewound first.
    ``suggested``: a file holding the suggested policy (with ``dispatch direct``)."""
    def make(_model, _inputs: tuple, backend: str) -> list[latency.Variant]:
        torch.set_grad_enabled(False)  # inference, as in wall_clock; for the rest of the child
        return variants(int(layers), Path(suggested).read_text(encoding="utf-8"), backend)

    return make


def variants(layers: int, suggested: str, backend: str = "inductor") -> list[latency.Variant]:
    model, _, kwargs = llama_model.build(layers, WIDTH)
    cache = kwargs[cache_keyword(model)]
    length = int(cache.layers[0].cumulative_length)

    def step(fn):
        call = rewound(fn, cache, length)
        return lambda *_: call(**kwargs)

    def torch_way(label: str, recipe: latency.Recipe) -> latency.Variant:
        fn = step(torch.compile(latency.own_copy(model), backend=backend,
                                options={"guard_filter_fn": getattr(torch.compiler, f"{recipe.std}_unsafe")}))
        with torch_internals.config_patch(install_free_tensors=recipe.ift):
            fn()
        return latency.Variant(label, fn, latency.stance_block)

    out = [latency.Variant("eager", step(model)),
           latency.Variant(NO_FILTER, step(torch.compile(latency.own_copy(model), backend=backend)))]
    if torch_internals.has_config(KNOB):
        fn = step(torch.compile(latency.own_copy(model), backend=backend))
        with dict_tags():
            fn()
        out.append(latency.Variant(DICT_TAGS, fn, dict_tags))
    out.append(torch_way(RECIPE, latency.RECIPES[2]))
    out.append(torch_way(FLOOR_TORCH, latency.RECIPES[3]))
    for label, policy in ((FLOOR, gp.load(latency.RECIPES[3].policy_source())), (SAFE, "watch_state"),
                          (SUGGESTED, gp.load(suggested))):
        out.append(latency.Variant(label, step(gp.compile(latency.own_copy(model), policy, backend=backend))))
    return out


def wall_clock(layers: int, suggested: str, calls: int, block: int) -> dict[str, float]:
    """``{variant: median µs per call}`` of one interleaved run."""
    with torch.no_grad():  # inference: compiled, checked and timed without autograd
        vs = variants(layers, suggested)
        latency.check_outputs(vs, ())
        latency.run(vs, (), calls, block)
    return {r["variant"]: r["median_us"] for r in latency.summarize(vs)}


def table(layers: int, wall: dict[str, float], counts: dict[str, float]) -> tuple[list[str], dict[str, float]]:
    """One depth's rows, and ``{SAFE, SUGGESTED: instructions over the better of floor and recipe}``
    (wall clock where no instructions were counted)."""
    best = min(counts[FLOOR], counts[RECIPE]) if counts else min(wall[FLOOR], wall[RECIPE])
    lines = [f"**{layers} layers**", "", "| variant | median µs | instructions per call | "
             "instructions / better of floor and recipe |", "|---|---:|---:|---:|"]
    for label, us in wall.items():
        n = counts.get(label)
        lines.append(f"| {label} | {us:.1f} | " + (f"{n:,.0f} | {n / best:.3f} |" if n else " | |"))
    return lines + [""], {label: (counts or wall)[label] / best for label in (SAFE, SUGGESTED)}


def main(argv: list[str] | None = None) -> int:
    args = counted_parser(__doc__, ("--layers", "2,36,82"), calls=300, instructions=100).parse_args(argv)
    torch.set_num_threads(1)
    lines = [recorded(latency.machine(), f"Inductor; width {WIDTH}", args), ""]
    suggested = text_file(decode_text())  # the 2-layer model's suggested policy, + dispatch direct
    ratios = {}
    for layers in (int(n) for n in args.layers.split(",")):
        print(f"{layers} layers: wall clock", file=sys.stderr)
        wall = wall_clock(layers, Path(suggested).read_text(encoding="utf-8"), args.calls, args.block)
        counts = {}
        if args.instructions:
            print(f"{layers} layers: instructions", file=sys.stderr)
            counts = callgrind.count("bench_depth", "depth_variants", [layers, suggested], "mlp", "inductor",
                                     args.instructions, timeout_s=7200)
        rows, ratios[layers] = table(layers, wall, counts)
        lines += rows
    for label in (SAFE, SUGGESTED):
        met = all(r[label] <= TARGET for r in ratios.values())
        lines.append(f"Target: {label} at most {TARGET}× the better of the zero-guard floor and torch's recipe "
                     f"at every depth: **{'met' if met else 'not met'}** ("
                     + "; ".join(f"{n} layers {r[label]:.3f}×" for n, r in ratios.items()) + ").")
    publish("\n".join(lines), args.results, BEGIN, END, "Per call against depth (`bench/bench_depth.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
