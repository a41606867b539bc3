"""The models of test_libraries.py, built from configs with random weights (no download):
a tiny diffusers ``UNet2DConditionModel`` and ``FluxTransformer2DModel``, a PEFT LoRA on a
2-layer HF Llama, each with the inputs of one call. The same configs as
bench/bench_libraries.py's."""

from __future__ import annotations

import torch


def unet():
    """A tiny ``UNet2DConditionModel`` and the keyword inputs of one denoising step."""
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    model = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32).eval()
    return model, {"sample": torch.randn(1, 4, 8, 8), "timestep": torch.tensor([10]),
                   "encoder_hidden_states": torch.randn(1, 4, 32), "return_dict": False}


def flux(double: int = 2, single: int = 2):
    """A tiny ``FluxTransformer2DModel`` (``double`` and ``single`` blocks of each kind)."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=double, num_single_layers=single,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, axes_dims_rope=(4, 6, 6)).eval()
    return model, {"hidden_states": torch.randn(1, 16, 4), "encoder_hidden_states": torch.randn(1, 8, 32),
                   "pooled_projections": torch.randn(1, 32), "timestep": torch.tensor([0.5]),
                   "img_ids": torch.zeros(16, 3), "txt_ids": torch.zeros(8, 3), "return_dict": False}


def peft_llama():
    """LoRA adapters ``a`` and ``b`` (rank 4 on ``q_proj``, ``v_proj``, B drawn non-zero so each
    changes the output) on a 2-layer HF Llama, and a 4-token prompt."""
    import peft
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    lora = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = peft.get_peft_model(transformers.LlamaForCausalLM(config).eval(), lora, adapter_name="a")
    model.add_adapter("b", peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    return model.eval(), {"input_ids": torch.tensor([[1, 2, 3, 4]])}
