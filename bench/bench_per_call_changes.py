#!/usr/bin/env python3
"""Per-call cost when the model's state changes on every call, the way library users make it
(issue 48): a 6-layer MLP (width 32) under ``torch.nn.utils.prune`` (a forward pre-hook assigns
``weight`` on every call), ``spectral_norm`` (the same, by power iteration), ``functional_call``
with the model's own parameters, a PEFT LoRA adapter disabled around each call
(``disable_adapter()``), accelerate's ``cpu_offload`` (hooks that load each weight on every
call) and diffusers' layerwise casting (bfloat16 storage, float32 compute: hooks that cast the
weights on every call), each applied after warm-up.

Variants, each compiled from its own copy with the change applied to it: eager, no filter
(plain ``torch.compile``) and ``gp.compile(model, "watch_state")``. Each copy has a class and
code object of its own (``latency.own_class_copy``): in one process, copies of one class would
share their code's cache entries, and direct dispatch refuses entries another object compiled.
Wall clock per call in one interleaved run (``guardpolicy.tools.latency``), one thread, each
compared with eager's output; instructions per call under callgrind (bench/callgrind.py); the compiles each made (a counting backend around ``eager``/``inductor``), and the calls
``watch_state`` answered hot (runtime/watch/hot.py). Needs peft, accelerate and diffusers
(``pip install peft accelerate diffusers``); a change whose library is missing is left out,
and said so. Prints markdown; ``--results bench/DETAILS.md`` writes its section there.

Usage: bench_per_call_changes.py [--changes prune,...] [--backends eager,inductor] [--calls 300]
                                 [--block 20] [--instructions 100] [--results bench/DETAILS.md]
"""

from __future__ import annotations

import sys

import torch
import torch.nn.utils.prune
from results_section import counted_parser, publish, recorded
from torch import nn

import callgrind
import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools import latency

BEGIN = "<!-- per-call-changes: begin (bench/bench_per_call_changes.py writes this section) -->"
END = "<!-- per-call-changes: end -->"
WIDTH = 32


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(6)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _prune(m):
    torch.nn.utils.prune.l1_unstructured(m.layers[0], "weight", amount=0.3)


def _spectral(m):
    torch.nn.utils.spectral_norm(m.layers[1])


def _functional(m):
    params = dict(m.named_parameters())
    return lambda fn: (lambda x: torch.func.functional_call(fn, params, (x,)))


def _peft(m):
    import peft

    model = peft.get_peft_model(m, peft.LoraConfig(r=4, target_modules=["layers.0", "layers.3"]))

    def wrap(fn):
        def run(x):
            with model.disable_adapter():
                return fn(x)
        return run
    return wrap


def _offload(m):
    import accelerate

    accelerate.cpu_offload(m, execution_device=torch.device("cpu"))


def _casting(m):
    from diffusers.hooks import apply_layerwise_casting

    apply_layerwise_casting(m, storage_dtype=torch.bfloat16, compute_dtype=torch.float32)


#: name -> apply(model): changes ``model`` in place; returns None, or how a call goes through
#: the change (``wrap(model or its compiled object) -> a callable``: functional_call, an adapter
#: disabled around the call)
CHANGES = {"prune": _prune, "spectral_norm": _spectral, "functional_call": _functional, "peft disable_adapter": _peft,
           "accelerate cpu_offload": _offload, "diffusers layerwise casting": _casting}


class Counting:
    """A backend that counts its compiles, then hands the graph to ``backend``."""

    def __init__(self, backend: str) -> None:
        self.backend, self.compiles = torch_internals.lookup_backend(backend), 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        return self.backend(gm, example_inputs)


def build(change: str, backend: str, x: torch.Tensor) -> tuple[list[latency.Variant], dict]:
    """The three variants after ``change``, each warmed up before it, and their counters."""
    torch.manual_seed(0)
    base = MLP().eval()
    variants, counters = [], {}
    for label in ("eager", "no filter", "watch_state"):
        model = latency.own_class_copy(base)  # its own code object: no variant meets another's cache entries
        counting = Counting(backend)
        if label == "eager":
            compiled = model
        elif label == "no filter":
            compiled = torch.compile(model, backend=counting)
        else:
            compiled = gp.compile(model, "watch_state", backend=counting)
        for _ in range(10):  # warm-up, before the change
            compiled(x)
        torch.manual_seed(1)  # what the change draws (spectral_norm's vectors) is the same in each copy
        wrap = CHANGES[change](model)
        variants.append(latency.Variant(label, wrap(compiled) if wrap else compiled))
        counters[label] = (counting, compiled)
    return variants, counters


def _input() -> torch.Tensor:
    torch.manual_seed(2)
    return torch.randn(4, WIDTH)


def change_variants(change: str):
    """The ``make`` of ``callgrind``: the variants after ``change``, called on the bench's own
    input (the model and inputs it is given are ignored)."""
    def make(_model, _inputs, backend):
        torch.set_grad_enabled(False)  # inference, for the rest of the process
        x = _input()
        variants, _ = build(change, backend, x)
        return [latency.Variant(v.label, lambda *_, fn=v.fn: fn(x)) for v in variants]
    return make


def main(argv: list[str] | None = None) -> int:
    args = counted_parser(__doc__, ("--backends", "eager,inductor"), calls=300, instructions=100)
    args.add_argument("--changes", default=",".join(CHANGES))
    args = args.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    x = _input()
    lines = [recorded(latency.machine(), "a 6-layer MLP (width 32)", args), "",
             "| backend | change | no filter µs | watch_state µs | watch_state / no filter | instructions per call "
             "(no filter, watch_state) | watch_state / no filter (instructions) | compiles (no filter, watch_state) "
             "| calls answered hot |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for backend in args.backends.split(","):
        for change in args.changes.split(","):
            torch.compiler.reset()
            try:
                vs, counters = build(change, backend, x)
            except ImportError as error:
                lines.append(f"| {backend} | {change} | left out: {error} | | | | | | |")
                continue
            latency.check_outputs(vs, (x,))
            latency.run(vs, (x,), args.calls, args.block)
            rows = {r["variant"]: r["median_us"] for r in latency.summarize(vs)}
            nf, ws = rows["no filter"], rows["watch_state"]
            counts = callgrind.count("bench_per_call_changes", "change_variants", [change], "mlp", backend,
                                     args.instructions, timeout_s=3600) if args.instructions else {}
            n_nf, n_ws = counts.get("no filter"), counts.get("watch_state")
            hot = sum(gp.stats(counters["watch_state"][1]).watches.hot.values())
            lines.append(f"| {backend} | {change} | {nf:.1f} | {ws:.1f} | {ws / nf:.2f} | "
                         + (f"{n_nf:,.0f}, {n_ws:,.0f} | {n_ws / n_nf:.3f}" if counts else " | ")
                         + f" | {counters['no filter'][0].compiles}, {counters['watch_state'][0].compiles} | {hot} |")
    publish("\n".join(lines), args.results, BEGIN, END,
            "State changed on every call (`bench/bench_per_call_changes.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
