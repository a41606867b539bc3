"""A PEFT LoRA adapter loaded per request and the previous one deleted."""

import torch


def _base():
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))


def build():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_base(), LoraConfig(r=4, target_modules=["0", "2"], init_lora_weights=False),
                           adapter_name="req0")
    return model.eval(), (torch.randn(2, 8),)


def run(compiled, model):
    from peft import LoraConfig

    x = torch.randn(2, 8)
    for i in range(1, 12):
        model.add_adapter(f"req{i}", LoraConfig(r=4, target_modules=["0", "2"], init_lora_weights=False))
        model.set_adapter(f"req{i}")
        model.delete_adapter(f"req{i - 1}")
        compiled(x)
