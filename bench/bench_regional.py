#!/usr/bin/env python3
"""Per-call cost of a model compiled block by block (regional compilation, as
``torch.compile`` on each repeated block): a stack of pre-norm MLP blocks (width 64) at 2, 36
and 82 blocks, every block compiled on its own, Inductor, one thread. One cache entry serves
every block (the blocks share their code), so each watch gate holds one state per block: what
a call costs must not grow with the number of blocks (watch_index.h finds a block's state by
its module, not by asking each state in turn).

Variants: no filter; torch's recipe the torch way without free tensors
(``skip_guard_on_all_nn_modules_unsafe`` and the ``skip_guard_eval_unsafe`` stance: with
``install_free_tensors`` too, the first block's graph, its weights baked in, serves every
block, whose outputs are then wrong); the safe setting,
``gp.compile(block, "watch_state")`` per block. Instructions per model call under callgrind
(bench/callgrind.py) and wall clock in one interleaved run (``guardpolicy.tools.latency``).
Prints markdown; ``--results bench/DETAILS.md`` writes its section there.

Usage: bench_regional.py [--blocks 2,36,82] [--calls 300] [--block 20] [--instructions 50]
                         [--results bench/DETAILS.md]
"""

from __future__ import annotations

import sys

import torch
from results_section import counted_parser, publish, recorded
from torch import nn

import callgrind
import guardpolicy as gp
from guardpolicy.tools import latency

BEGIN = "<!-- regional: begin (bench/bench_regional.py writes this section) -->"
END = "<!-- regional: end -->"
WIDTH = 64
NO_FILTER = "no filter"
RECIPE = "torch's recipe without free tensors (nn modules +stance)"
SAFE = "watch_state (gp.compile)"


class Block(nn.Module):
    """A pre-norm MLP block: ``x + down(gelu(up(norm(x))))``, x of shape (batch, WIDTH)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def stack(blocks: int) -> list[Block]:
    """``blocks`` blocks of one new subclass of ``Block`` (a code object of their own: the
    blocks of one variant share a cache entry, those of two variants never do), the same
    weights in every stack."""
    torch.manual_seed(0)
    out = [latency.own_class_copy(Block().eval())]
    out += [Block().eval() for _ in range(blocks - 1)]
    for b in out[1:]:
        b.__class__ = type(out[0])
    return out


def chained(fns: list, x: torch.Tensor) -> object:
    """One model call: the blocks in turn on ``x`` (its arguments ignored, as callgrind's are)."""
    def call(*_: object) -> torch.Tensor:
        y = x
        for fn in fns:
            y = fn(y)
        return y

    return call


def variants(blocks: int, backend: str = "inductor") -> list[latency.Variant]:
    torch.set_grad_enabled(False)  # inference, for the rest of the process
    x = torch.randn(4, WIDTH)
    recipe = chained([torch.compile(b, backend=backend,
                                    options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
                      for b in stack(blocks)], x)
    return [latency.Variant("eager", chained(stack(blocks), x)),
            latency.Variant(NO_FILTER, chained([torch.compile(b, backend=backend) for b in stack(blocks)], x)),
            latency.Variant(RECIPE, recipe, latency.stance_block),
            latency.Variant(SAFE, chained([gp.compile(b, "watch_state", backend=backend) for b in stack(blocks)], x))]


def regional_variants(blocks: int | str):
    """The ``make`` of ``callgrind``: the model and inputs it is given are ignored."""
    return lambda _model, _inputs, backend: variants(int(blocks), backend)


def wall_clock(blocks: int, calls: int, block: int) -> dict[str, float]:
    """``{variant: median µs per model call}`` of one interleaved run."""
    vs = variants(blocks)
    latency.check_outputs(vs, ())
    latency.run(vs, (), calls, block)
    return {r["variant"]: r["median_us"] for r in latency.summarize(vs)}


def main(argv: list[str] | None = None) -> int:
    args = counted_parser(__doc__, ("--blocks", "2,36,82"), calls=300, instructions=50).parse_args(argv)
    torch.set_num_threads(1)
    lines = [recorded(latency.machine(), f"Inductor; width {WIDTH}", args),
             "", "| blocks | variant | median µs | instructions per call | per block over torch's recipe |",
             "|---:|---|---:|---:|---:|"]
    for n in (int(b) for b in args.blocks.split(",")):
        print(f"{n} blocks", file=sys.stderr)
        wall = wall_clock(n, args.calls, args.block)
        counts = callgrind.count("bench_regional", "regional_variants", [n], "mlp", "inductor", args.instructions,
                                 timeout_s=7200) if args.instructions else {}
        for label, us in wall.items():
            c = counts.get(label)
            over = f"{(c - counts[RECIPE]) / n:,.0f}" if c and label != "eager" else ""
            lines.append(f"| {n} | {label} | {us:.1f} | " + (f"{c:,.0f}" if c else "") + f" | {over} |")
    publish("\n".join(lines), args.results, BEGIN, END,
            "Per call of a model compiled block by block (`bench/bench_regional.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
