#!/usr/bin/env python3
"""Regional compilation of the diffusers models, the way diffusers compiles them: each
repeated block (``model._repeated_blocks``) compiled in place, a tiny ``FluxTransformer2DModel``
and ``UNet2DConditionModel`` from configs with random weights (no download).

Variants, each on its own copy whose blocks have a class of their own (fresh ``forward`` code,
so no variant is served another's cache entries): eager; diffusers'
``model.compile_repeated_blocks()`` (plain ``torch.compile`` of each block); torch's recipe per
block without free tensors (``block.compile(options={"guard_filter_fn":
skip_guard_on_all_nn_modules_unsafe})``, a dict of its own per block, and the
``skip_guard_eval_unsafe`` stance; with ``install_free_tensors`` the first block's graph would
serve every block); ``gp.compile_repeated_blocks(model, "watch_state")``. For each: the graphs
compiled and the wall clock of the first two calls (warm-up), then wall clock per call in one
interleaved run (``guardpolicy.tools.latency``) and instructions per call under callgrind
(bench/callgrind.py), one thread. Last, the memory each compile keeps (``memory_kept``): a fresh
copy compiled and called twice more, once every variant's one-time costs (imports, Inductor's
loaded kernels) are paid, and the wall clock of another fresh copy's warm-up then (the first
warm-up of a process pays those costs in whichever variant comes first). Needs diffusers. Prints markdown; ``--results
bench/DETAILS.md`` writes its section there.

Usage: bench_diffusers_regional.py [--models flux,unet] [--backends inductor,eager] [--calls 100]
                                   [--block 10] [--instructions 10] [--results bench/DETAILS.md]
"""

from __future__ import annotations

import copy
import ctypes
import gc
import sys
import time
import tracemalloc

import torch
from results_section import count_cells, counted_parser, publish, recorded

import callgrind
import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools import latency
from guardpolicy.tools.common.library_models import build_flux, build_unet

BEGIN = "<!-- diffusers-regional: begin (bench/bench_diffusers_regional.py writes this section) -->"
END = "<!-- diffusers-regional: end -->"
MODELS = {"flux": build_flux, "unet": build_unet}
NO_FILTER = "no filter"  # diffusers' compile_repeated_blocks: plain torch.compile per block
RECIPE = "torch's recipe per block (nn modules +stance, no free tensors)"
WATCH_STATE = "gp.compile_repeated_blocks watch_state"

#: Per variant label of the last ``variants`` call: (graphs compiled, warm-up seconds).
WARMUP: dict[str, tuple[int, float]] = {}


def _own_block_classes(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (a copy), each repeated block's class replaced by a subclass of the same name
    with a fresh ``forward`` code object (``latency.own_class``), one per class."""
    model = copy.deepcopy(model)
    fresh: dict = {}
    for block in model.modules():
        cls = type(block)
        if cls.__name__ in model._repeated_blocks:
            if cls not in fresh:
                fresh[cls] = latency.own_class(cls)
            block.__class__ = fresh[cls]
    return model


def _compile(model: torch.nn.Module, label: str, backend: str) -> torch.nn.Module:
    if label == NO_FILTER:
        model.compile_repeated_blocks(backend=backend)
    elif label == RECIPE:
        for block in model.modules():
            if type(block).__name__ in model._repeated_blocks:
                block.compile(backend=backend,
                              options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    else:
        gp.compile_repeated_blocks(model, "watch_state", backend=backend)
    return model


def _warmed_up(model: torch.nn.Module, kwargs: dict, label: str, backend: str) -> tuple[torch.nn.Module, float]:
    """A fresh copy of ``model`` compiled as ``label`` says and called twice, and the seconds
    the two calls took (the compiles among them)."""
    compiled = _compile(_own_block_classes(model), label, backend)
    start = time.perf_counter()
    for _ in range(2):
        compiled(**kwargs)
    return compiled, time.perf_counter() - start


def variants(name: str, backend: str = "inductor") -> list[latency.Variant]:
    """eager and the three regional compiles, each on its own copy, warmed up (``WARMUP``)."""
    torch.set_grad_enabled(False)
    model, kwargs = MODELS[name]()
    out = [latency.Variant("eager", lambda *_: model(**kwargs).sample)]
    counters = torch_internals.counters()
    for label in (NO_FILTER, RECIPE, WATCH_STATE):
        counters.clear()
        compiled, seconds = _warmed_up(model, kwargs, label, backend)
        WARMUP[label] = (counters["stats"]["unique_graphs"], seconds)
        stance = latency.stance_block if label == RECIPE else None
        out.append(latency.Variant(label, lambda *_, m=compiled: m(**kwargs).sample, stance))
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(field, ctypes.c_size_t) for field in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _malloc_in_use() -> int:
    """Bytes glibc's malloc has handed out and not taken back, every arena (``mallinfo2``:
    ``uordblks`` + ``hblkhd``): C++ guard managers and watch states, Python's blocks over 512 bytes."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def compiled_again(name: str, backend: str) -> dict[str, tuple[float, float, float]]:
    """Per compiled variant, after the timed variants (so that none pays what the first compile
    of a process loads): ``(warm-up s, Python MiB, malloc MiB)``. The wall clock of compiling a
    fresh copy of the model and calling it twice; then what a second fresh copy, compiled and
    called twice, still holds: ``tracemalloc``'s traced bytes (every Python allocation) and
    ``_malloc_in_use``, each after ``gc.collect()`` minus before the compile."""
    torch.set_grad_enabled(False)
    model, kwargs = MODELS[name]()
    kept = {}
    for label in (NO_FILTER, RECIPE, WATCH_STATE):
        warm = _warmed_up(model, kwargs, label, backend)[1]
        compiled = _own_block_classes(model)
        gc.collect()
        tracemalloc.start()
        python, c_heap = tracemalloc.get_traced_memory()[0], _malloc_in_use()
        _compile(compiled, label, backend)
        for _ in range(2):
            compiled(**kwargs)
        gc.collect()
        kept[label] = (warm, (tracemalloc.get_traced_memory()[0] - python) / 2**20, (_malloc_in_use() - c_heap) / 2**20)
        tracemalloc.stop()
        del compiled
    return kept


def regional_variants(name: str):
    """The ``make`` of ``callgrind``: the demo model and inputs it is given are ignored."""
    return lambda _model, _inputs, backend: variants(name, backend)


def main(argv: list[str] | None = None) -> int:
    args = counted_parser(__doc__, ("--backends", "inductor,eager"), calls=100, instructions=10)
    args.add_argument("--models", default=",".join(MODELS))
    args = args.parse_args(argv)
    torch.set_num_threads(1)
    lines = [recorded(latency.machine(), "tiny diffusers Flux and UNet, repeated blocks compiled in place", args), "",
             "| model | backend | variant | graphs | warm-up s | warm-up again s | Python MiB kept | malloc MiB kept "
             "| median µs | instructions per call | / recipe | / no filter |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            rows, counts = callgrind.timed_and_counted("bench_diffusers_regional", "regional_variants", variants, name, backend, args)
            recipe, plain = counts.get(RECIPE), counts.get(NO_FILTER)
            again = compiled_again(name, backend)
            for r in rows:
                n = counts.get(r["variant"])
                graphs, warm = WARMUP.get(r["variant"], ("", None))
                memory = [f"{value:.2f}" for value in again[r["variant"]]] if r["variant"] in again else ["", "", ""]
                cells = [name, backend, r["variant"], str(graphs), f"{warm:.2f}" if warm is not None else "",
                         *memory, f"{r['median_us']:.1f}", *count_cells(n, recipe, plain)]
                lines.append("| " + " | ".join(cells) + " |")
    publish("\n".join(lines), args.results, BEGIN, END,
            "diffusers models compiled block by block (`bench/bench_diffusers_regional.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
