"""A user-style model for the audit tests: a ``ModuleList`` of residual blocks, each reading a
module-level config dict (``CONFIG``) and its own int and bool attributes."""

import torch
from torch import nn

CONFIG = {"residual_scale": 1.0, "use_gate": True, "activation": "gelu"}


class Block(nn.Module):
    def __init__(self, width: int, index: int):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.index = index
        self.enabled = True

    def forward(self, x):
        h = self.fc(x)
        h = torch.nn.functional.gelu(h) if CONFIG["activation"] == "gelu" else torch.relu(h)
        if CONFIG["use_gate"]:
            h = h * torch.sigmoid(h)
        if not self.enabled:
            return x
        return x + h * CONFIG["residual_scale"] * (self.index + 1)


class BlocksModel(nn.Module):
    def __init__(self, width: int = 32, depth: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, i) for i in range(depth))
        self.head = nn.Linear(width, 8)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build():
    torch.manual_seed(0)
    return BlocksModel().eval(), (torch.randn(4, 32),)
