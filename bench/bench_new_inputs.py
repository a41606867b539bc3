#!/usr/bin/env python3
"""Per-call cost when an object passed in is new on every call: a 6-layer MLP (width 32) whose
forward reads an options dataclass (``Options(x, scale)``) built anew for each call, as
per-request options are. Under the safe setting the options object's guards have a gate of
their own (runtime/watch/roots.py): each call evaluates them and reads that object's sources
again in Python, not the model's.

Variants: eager; no filter; torch's recipe the torch way (``skip_guard_on_all_nn_modules_unsafe``,
``install_free_tensors``, the ``skip_guard_eval_unsafe`` stance); ``gp.compile(model,
"watch_state")``. Each call builds its options object (in every variant, eager too).
Instructions per call under callgrind (bench/callgrind.py) and wall clock in one interleaved
run (``guardpolicy.tools.latency``), Inductor, one thread. Prints markdown; ``--results
bench/DETAILS.md`` writes its section there.

Usage: bench_new_inputs.py [--backends inductor] [--calls 600] [--block 20] [--instructions 100]
                           [--results bench/DETAILS.md]
"""

from __future__ import annotations

import dataclasses
import sys

import torch
from results_section import counted_parser, publish, recorded
from torch import nn

import callgrind
import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools import latency

BEGIN = "<!-- new-inputs: begin (bench/bench_new_inputs.py writes this section) -->"
END = "<!-- new-inputs: end -->"
WIDTH = 32


@dataclasses.dataclass
class Options:
    """Per-request options: ``x`` of shape (4, WIDTH), ``scale`` a float."""

    x: torch.Tensor
    scale: float


class MLP(nn.Module):
    def __init__(self, layers: int = 6) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(layers))

    def forward(self, options: Options) -> torch.Tensor:
        x = options.x
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x * options.scale


def variants(backend: str = "inductor") -> list[latency.Variant]:
    """eager, no filter, torch's recipe (the torch way) and watch_state, each on its own copy."""
    torch.set_grad_enabled(False)  # inference, for the rest of the process
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(4, WIDTH)

    def fresh(fn):
        return lambda *_: fn(Options(x, 2.0))  # a new options object on every call

    recipe = torch.compile(latency.own_copy(model), backend=backend,
                           options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    with torch_internals.config_patch(install_free_tensors=True):
        recipe(Options(x, 2.0))  # compiles with the knob, the torch way
    return [latency.Variant("eager", fresh(model)),
            latency.Variant("no filter", fresh(torch.compile(latency.own_copy(model), backend=backend))),
            latency.Variant("torch's recipe (nn modules +ift +stance)", fresh(recipe), latency.stance_block),
            latency.Variant("watch_state (gp.compile)",
                            fresh(gp.compile(latency.own_copy(model), "watch_state", backend=backend)))]


def new_input_variants():
    """The ``make`` of ``callgrind``: the model and inputs it is given are ignored."""
    return lambda _model, _inputs, backend: variants(backend)


def main(argv: list[str] | None = None) -> int:
    args = counted_parser(__doc__, ("--backends", "inductor"), calls=600, instructions=100).parse_args(argv)
    torch.set_num_threads(1)
    lines = [recorded(latency.machine(), f"6-layer MLP, width {WIDTH}", args), "",
             "| backend | variant | median µs | instructions per call | / no filter (instructions) |",
             "|---|---|---:|---:|---:|"]
    for backend in args.backends.split(","):
        vs = variants(backend)
        latency.check_outputs(vs, ())
        latency.run(vs, (), args.calls, args.block)
        counts = callgrind.count("bench_new_inputs", "new_input_variants", [], "mlp", backend, args.instructions,
                                 timeout_s=3600) if args.instructions else {}
        for r in latency.summarize(vs):
            n = counts.get(r["variant"])
            ratio = f"{n / counts['no filter']:.3f}" if n and "no filter" in counts else ""
            lines.append(f"| {backend} | {r['variant']} | {r['median_us']:.1f} | " + (f"{n:,.0f}" if n else "")
                         + f" | {ratio} |")
    publish("\n".join(lines), args.results, BEGIN, END,
            "A new object passed in on every call (`bench/bench_new_inputs.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
