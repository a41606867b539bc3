"""A PEFT LoRA model with two adapters: a small MLP whose ``fc1`` and ``fc2`` get LoRA
adapters ``"a"`` (rank 4) and ``"b"`` (rank 8) through ``peft.get_peft_model``; ``"a"`` is
active. Serving switches them with ``set_adapter`` and ``disable_adapter()``. The adapters'
``lora_B`` weights are random (PEFT starts them at zero), so each adapter changes the output.
Input: ``(4, 16)`` float32."""

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def build():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(MLP(), LoraConfig(r=4, lora_alpha=8, target_modules=["fc1", "fc2"]), adapter_name="a")
    model.add_adapter("b", LoraConfig(r=8, lora_alpha=8, target_modules=["fc1", "fc2"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    model.set_adapter("a")
    return model.eval(), (torch.randn(4, 16),)
