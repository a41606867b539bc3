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
from results_section import counted_parser, publish, recorded

import callgrind
import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools import latency

BEGIN = "<!-- libraries: begin (bench/bench_libraries.py writes this section) -->"
END = "<!-- libraries: end -->"
WATCH_STATE = "watch_state (gp.compile)"


def unet():
    """A tiny ``UNet2DConditionModel``, its inputs and what of its output to compare."""
    from diffusers import UNet2DConditionModel

    model = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32)
    return model, {"sample": torch.randn(1, 4, 8, 8), "timestep": torch.tensor([10]),
                   "encoder_hidden_states": torch.randn(1, 4, 32)}, "sample"


def flux():
    """A tiny ``FluxTransformer2DModel`` (one double and one single block)."""
    from diffusers import FluxTransformer2DModel

    model = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, axes_dims_rope=(4, 6, 6))
    return model, {"hidden_states": torch.randn(1, 16, 4), "encoder_hidden_states": torch.randn(1, 8, 32),
                   "pooled_projections": torch.randn(1, 32), "timestep": torch.tensor([0.5]),
                   "img_ids": torch.zeros(16, 3), "txt_ids": torch.zeros(8, 3)}, "sample"


def peft_llama():
    """LoRA (rank 4 on ``q_proj``, ``v_proj``) on a 2-layer HF Llama, a 4-token prompt."""
    import peft
    import transformers

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    model = peft.get_peft_model(transformers.LlamaForCausalLM(config),
                                peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    return model, {"input_ids": torch.tensor([[1, 2, 3, 4]])}, "logits"


MODELS = {"unet": unet, "flux": flux, "peft-llama": peft_llama}


#: The watch_state object of the last ``variants`` call, for its guard counts.
_WATCHED: list = []


def variants(name: str, backend: str = "inductor") -> list[latency.Variant]:
    """eager, no filter, torch's recipe (the torch way) and watch_state, each on its own copy."""
    torch.set_grad_enabled(False)  # inference, for the rest of the process
    torch.manual_seed(0)
    model, kwargs, field = MODELS[name]()
    model.eval()

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
            vs = variants(name, backend)
            latency.check_outputs(vs, ())
            latency.run(vs, (), args.calls, args.block)
            counts = callgrind.count("bench_libraries", "library_variants", [name], "mlp", backend,
                                     args.instructions, timeout_s=5400) if args.instructions else {}
            recipe, plain = counts.get("torch's recipe (nn modules +ift +stance)"), counts.get("no filter")
            for r in latency.summarize(vs):
                n = counts.get(r["variant"])
                cells = [name, backend, r["variant"], f"{r['median_us']:.1f}", f"{n:,.0f}" if n else "",
                         f"{n / recipe:.3f}" if n and recipe else "", f"{n / plain:.3f}" if n and plain else "",
                         watched_and_kept() if r["variant"] == WATCH_STATE else ""]
                lines.append("| " + " | ".join(cells) + " |")
    publish("\n".join(lines), args.results, BEGIN, END,
            "Models built with diffusers and peft (`bench/bench_libraries.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
