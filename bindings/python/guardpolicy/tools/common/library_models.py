"""Tiny models of the libraries people compile, with random weights from small configs (no
download), shared by bench/bench_libraries.py and the libraries' tests: a diffusers
``UNet2DConditionModel`` (its ``ModelMixin`` overrides ``__getattr__``), a diffusers
``FluxTransformer2DModel`` (``_repeated_blocks``: compiled block by block), and a PEFT LoRA on
a 2-layer HF Llama. Each builder returns ``(model, kwargs)``: the model in eval mode on the CPU
and the keyword inputs of one call, ``model(**kwargs)``. diffusers and peft are imported only
when a model of theirs is built (the ``test`` extra brings them)."""

from __future__ import annotations

from typing import Any

from .extras import require


def build_unet(seed: int = 0) -> tuple[Any, dict]:
    """A ``UNet2DConditionModel`` (2 blocks of 32 and 64 channels, one cross-attention block
    each way, cross-attention width 32) and one denoising step's inputs: a latent ``sample`` of
    shape (1, 4, 8, 8), ``timestep`` 10, ``encoder_hidden_states`` of shape (1, 4, 32)."""
    diffusers = require("diffusers", "the diffusers models")
    torch = require("torch", "the diffusers models")
    torch.manual_seed(seed)
    model = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32)
    return model.eval(), {"sample": torch.randn(1, 4, 8, 8), "timestep": torch.tensor([10]),
                          "encoder_hidden_states": torch.randn(1, 4, 32)}


def build_flux(layers: int = 1, seed: int = 0) -> tuple[Any, dict]:
    """A ``FluxTransformer2DModel`` with ``layers`` double-stream and ``layers`` single-stream
    blocks (2 heads of 16) and one step's inputs: 16 image tokens of 4 channels, 8 text tokens
    of width 32, pooled projections of width 32, ``timestep`` 0.5, zero position ids."""
    diffusers = require("diffusers", "the diffusers models")
    torch = require("torch", "the diffusers models")
    torch.manual_seed(seed)
    model = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=layers, num_single_layers=layers, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6))
    return model.eval(), {"hidden_states": torch.randn(1, 16, 4), "encoder_hidden_states": torch.randn(1, 8, 32),
                          "pooled_projections": torch.randn(1, 32), "timestep": torch.tensor([0.5]),
                          "img_ids": torch.zeros(16, 3), "txt_ids": torch.zeros(8, 3)}


def build_peft_llama(adapters: tuple = ("default",), init_lora_weights: bool = True,
                     seed: int = 0) -> tuple[Any, dict]:
    """A ``PeftModel``: a LoRA adapter of rank 4 on ``q_proj`` and ``v_proj`` per name in
    ``adapters`` (the first active) on a 2-layer HF ``LlamaForCausalLM`` (width 32, 4 heads,
    2 key/value heads, vocabulary 128), and a 4-token prompt. ``init_lora_weights=False`` draws
    each adapter's B non-zero, so that the adapter changes the output."""
    peft = require("peft", "the PEFT models")
    transformers = require("transformers", "the PEFT models")
    torch = require("torch", "the PEFT models")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)

    def lora():
        return peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=init_lora_weights)

    model = peft.get_peft_model(transformers.LlamaForCausalLM(config).eval(), lora(), adapter_name=adapters[0])
    for name in adapters[1:]:
        model.add_adapter(name, lora())
    return model.eval(), {"input_ids": torch.tensor([[1, 2, 3, 4]])}
