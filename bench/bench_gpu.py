#!/usr/bin/env python3
"""The decode step on a GPU (issue 41): a HF Llama decode step (``StaticCache``, one token per
call) on CUDA at 2, 36 and 82 layers (width 64, float32) and at TinyLlama-1.1B's shape (22
layers, width 2048, bfloat16; random weights), Inductor, with and without CUDA graphs
(``mode="reduce-overhead"``).

Variants: ``torch.compile`` with no filter, torch's recipe the torch way
(``skip_guard_on_all_nn_modules_unsafe``, ``install_free_tensors`` around the compile, the
``skip_guard_eval_unsafe`` stance) and the safe setting, ``gp.compile(model, "watch_state")``.
Per variant, in one interleaved run: the CPU time of each call without a sync (what a serving
loop that overlaps scheduling with the GPU pays per step) and tokens/s (a sync at both ends of
each block). Then per variant, the changes after warm-up: a forward hook added to
``layers[0].mlp`` and ``layers[0].self_attn.scaling`` changed, each caught or served stale
(compared with eager). Writes one JSON object per line to ``--out`` as it goes (a run cut
short keeps what it measured) and prints a markdown table at the end.

Run on the GPU machine with the ``device`` tool (shared/reference/gpu_runs.md); ``--device cpu``
runs the same on the CPU (a check of the script, not a GPU figure).

Usage: bench_gpu.py [--layers 2,36,82] [--tinyllama] [--steps 200] [--block 20] [--device cuda]
                    [--out OUT.jsonl]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools import latency
from guardpolicy.tools.decode import cache_keyword

NO_FILTER, RECIPE, SAFE = "no filter", "torch's recipe (nn modules +ift +stance)", 'gp.compile(model, "watch_state")'
TINYLLAMA = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
             "num_key_value_heads": 4, "vocab_size": 32000}


def narrow(layers: int) -> dict:
    return {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 128}


class Step:
    """One decode step of ``module`` through ``fn`` (``module`` itself, or what compiled it):
    the cache rewound to the prompt's length first, so every call is the same step; the logits
    cloned (a CUDA graph replay overwrites its output)."""

    def __init__(self, module, fn, device: str):
        self.module, self.fn = module, fn
        self.cache = StaticCache(config=module.config, max_cache_len=16)
        prompt = torch.tensor([[1, 5, 7]], device=device)
        with torch.no_grad():
            module(input_ids=prompt, cache_position=torch.arange(3, device=device), **{cache_keyword(module): self.cache})
        self.kwargs = {"input_ids": torch.tensor([[9]], device=device), cache_keyword(module): self.cache,
                       "cache_position": torch.tensor([3], device=device)}

    def __call__(self, *_):
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(3)
        return self.fn(**self.kwargs).logits.clone()


def variants(config: dict, device: str, dtype: torch.dtype, mode: str | None) -> list:
    """eager and the three compiled variants, each over its own copy of one model (its own
    Dynamo cache), compiled by its first call."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=64, **config)).to(device, dtype).eval()

    def step(compile_fn):
        module = latency.own_copy(model)
        return Step(module, compile_fn(module), device)

    options = {**(torch_internals.inductor_mode_options(mode) if mode else {}),  # torch takes a mode or options
               "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
    recipe = step(lambda m: torch.compile(m, options=options))
    with torch_internals.config_patch(install_free_tensors=latency.RECIPES[2].ift):
        recipe()  # compiled with the knob, the torch way
    return [latency.Variant("eager", Step(model, model, device)),
            latency.Variant(NO_FILTER, step(lambda m: torch.compile(m, mode=mode))),
            latency.Variant(RECIPE, recipe, latency.stance_block),
            latency.Variant(SAFE, step(lambda m: gp.compile(m, "watch_state", mode=mode)))]


def timed(vs: list, steps: int, block: int, device: str) -> dict:
    """Per variant: median CPU µs per call (no sync) and tokens/s (a sync around each block)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cpu = {v.label: [] for v in vs}
    wall = {v.label: 0.0 for v in vs}
    for v in vs:
        v.warm_up()
    for _ in range(steps // block):
        for v in vs:
            with v.timing_context():
                sync()
                t0 = time.perf_counter()
                for _ in range(block):
                    c0 = time.perf_counter_ns()
                    v.fn()
                    cpu[v.label].append(time.perf_counter_ns() - c0)
                sync()
                wall[v.label] += time.perf_counter() - t0
    n = (steps // block) * block
    return {label: {"cpu_us": statistics.median(cpu[label]) / 1e3, "tokens_per_s": n / wall[label]} for label in cpu}


def _hook(module):
    return module.model.layers[0].mlp.register_forward_hook(lambda m, a, out: out * 2)


def _scaling(module):
    attn = module.model.layers[0].self_attn
    attn.scaling, before = 4 * attn.scaling, attn.scaling
    return lambda: setattr(attn, "scaling", before)


#: The changes after warm-up: ``change(module)`` returns what undoes it.
CHANGES = {"forward hook on layers[0].mlp": lambda m: _hook(m).remove,
           "layers[0].self_attn.scaling × 4": _scaling}


def caught(vs: list, dtype: torch.dtype) -> dict:
    """Per compiled variant, each change after warm-up made to its own module and to eager's:
    caught (its step equals eager's) or stale."""
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}
    out = {}
    for what, change in CHANGES.items():
        undo = [change(v.fn.module) for v in vs]
        want = vs[0].fn()
        for v in vs[1:]:
            with v.timing_context():
                got = v.fn()
            out.setdefault(v.label, {})[what] = "caught" if torch.allclose(got, want, **tol) else "stale"
        for u in undo:
            u()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="2,36,82")
    parser.add_argument("--tinyllama", action="store_true", help="also TinyLlama-1.1B's shape, bfloat16")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path("bench_gpu.jsonl"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    shapes = [(f"{n} layers, width 64", narrow(int(n)), torch.float32) for n in args.layers.split(",")]
    shapes += [("TinyLlama-1.1B shape, bf16", TINYLLAMA, torch.bfloat16)] if args.tinyllama else []
    where = torch.cuda.get_device_name() if args.device == "cuda" else latency.machine()
    rows = []
    with args.out.open("a", encoding="utf-8") as out, torch.no_grad():
        for name, config, dtype in shapes:
            for mode in (None, "reduce-overhead"):
                torch.compiler.reset()
                vs = variants(config, args.device, dtype, mode)
                row = {"shape": name, "cuda_graphs": mode is not None, "device": where, "torch": torch.__version__,
                       "timing": timed(vs, args.steps, args.block, args.device), "changes": caught(vs, dtype)}
                out.write(json.dumps(row) + "\n")
                out.flush()
                rows.append(row)
                print(f"{name}, CUDA graphs {mode is not None}: done", file=sys.stderr)
    print(f"{where}, torch {torch.__version__}; {args.steps} steps per variant, blocks of {args.block}\n")
    print("| shape | CUDA graphs | variant | CPU µs per call | / recipe | tokens/s | changes caught |")
    print("|---|---|---|---:|---:|---:|---|")
    for r in rows:
        base = r["timing"][RECIPE]["cpu_us"]
        for label, t in r["timing"].items():
            ch = r["changes"].get(label, {})
            shown = f"{sum(v == 'caught' for v in ch.values())} of {len(ch)}" if ch else ""
            print(f"| {r['shape']} | {'yes' if r['cuda_graphs'] else 'no'} | {label} | {t['cpu_us']:.1f} | "
                  f"{t['cpu_us'] / base:.2f} | {t['tokens_per_s']:.0f} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
