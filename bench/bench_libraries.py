#!/usr/bin/env python3
"""Per-call cost on models built with the libraries people compile: a tiny diffusers
``UNet2DConditionModel`` (whose ``ModelMixin`` overrides ``__getattr__``), a tiny
``FluxTransformer2DModel``, and a PEFT LoRA model on a small HF Llama (``PeftModel`` forwards
unknown names to the wrapped model), each from a config with random weights (no download).

Variants, each compiled from its own copy: eager; no filter; torch's recipe the torch way
(``skip_guard_on_all_nn_modules_unsafe``, ``install_free_tensors``, the ``skip_guard_eval_unsafe``
stance); ``gp.compile(model, "watch_state")``, with the guards it watches and keeps.
Instructions per call under callgrind (bench/callgrind.py) and wall clock in one interleaved
run (``guardpolicy.tools.latency``), one thread. Needs diffusers and peft (``pip install
diffusers peft``). Prints markdown; ``--results bench/DETAILS.md`` writes its section there.

Usage: bench_libraries.py [--models unet,flux,peft-llama] [--backends eager,inductor] [--calls 200]
                          [--block 20] [--instructions 20] [--results bench/DETAILS.md]
"""

from __future__ import annotations

import sys

import torch
from results_section import count_cells, counted_parser, publish, recorded

import callgrind
import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools import latency
from guardpolicy.tools.common.library_models import build_flux, build_peft_llama, build_unet

BEGIN = "<!-- libraries: begin (bench/bench_libraries.py writes this section) -->"
END = "<!-- libraries: end -->"
WATCH_STATE = "watch_state (gp.compile)"


#: name -> (builder, the field of its output compared and timed)
MODELS = {"unet": (build_unet, "sample"), "flux": (build_flux, "sample"), "peft-llama": (build_peft_llama, "logits")}


#: The watch_state object of the last ``variants`` call, for its guard counts.
_WATCHED: list = []


def variants(name: str, backend: str = "inductor") -> list[latency.Variant]:
    """eager, no filter, torch's recipe (the torch way) and watch_state, each on its own copy."""
    torch.set_grad_enabled(False)  # inference, for the rest of the process
    build, field = MODELS[name]
    model, kwargs = build()

    def called(fn):
        return lambda *_: getattr(fn(**kwargs), field)

    recipe = torch.compile(latency.own_copy(model), backend=backend,
                           options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    with torch_internals.config_patch(install_free_tensors=True):
        recipe(**kwargs)  # compiles with the knob, the torch way
    watched = gp.compile(latency.own_copy(model), "watch_state", backend=backend)
    _WATCHED[:] = [watched]
    return [latency.Variant("eager", called(model)),
            latency.Variant("no filter", called(torch.compile(latency.own_copy(model), backend=backend))),
            latency.Variant("torch's recipe (nn modules +ift +stance)", called(recipe), latency.stance_block),
            latency.Variant(WATCH_STATE, called(watched))]


def library_variants(name: str):
    """The ``make`` of ``callgrind``: the demo model and inputs it is given are ignored."""
    return lambda _model, _inputs, backend: variants(name, backend)


def watched_and_kept() -> str:
    """``watched / kept`` guards of the last watch_state variant (after its calls)."""
    st = gp.stats(_WATCHED[0])
    return f"{sum(f.guards for f in st.watches.frames):,} / {len(st.watches.unwatched):,}"


def main(argv: list[str] | None = None) -> int:
    args = counted_parser(__doc__, ("--backends", "eager,inductor"), calls=200, instructions=20)
    args.add_argument("--models", default=",".join(MODELS))
    args = args.parse_args(argv)
    torch.set_num_threads(1)
    lines = [recorded(latency.machine(), "tiny diffusers UNet and Flux, PEFT LoRA on a 2-layer Llama", args), "",
             "| model | backend | variant | median µs | instructions per call | / torch's recipe | / no filter "
             "| watched / kept |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            rows, counts = callgrind.timed_and_counted("bench_libraries", "library_variants", variants, name, backend, args)
            recipe, plain = counts.get("torch's recipe (nn modules +ift +stance)"), counts.get("no filter")
            for r in rows:
                n = counts.get(r["variant"])
                cells = [name, backend, r["variant"], f"{r['median_us']:.1f}", *count_cells(n, recipe, plain),
                         watched_and_kept() if r["variant"] == WATCH_STATE else ""]
                lines.append("| " + " | ".join(cells) + " |")
    publish("\n".join(lines), args.results, BEGIN, END,
            "Models built with diffusers and peft (`bench/bench_libraries.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
