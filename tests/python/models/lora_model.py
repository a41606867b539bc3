"""A LoRA model whose adapter is swapped at serving time: ``model.adapter`` is an
``Adapter`` of rank 4; a swap puts in another ``Adapter``, possibly of another rank."""

import torch
from torch import nn


class Adapter(nn.Module):
    def __init__(self, width: int, rank: int):
        super().__init__()
        self.down = nn.Parameter(torch.randn(rank, width) * 0.1)
        self.up = nn.Parameter(torch.randn(width, rank) * 0.1)
        self.scaling = 2.0 / rank

    def forward(self, x):
        return (x @ self.down.t() @ self.up.t()) * self.scaling


class LoRAModel(nn.Module):
    def __init__(self, width: int = 16, rank: int = 4):
        super().__init__()
        self.base = nn.Linear(width, width)
        self.adapter = Adapter(width, rank)

    def forward(self, x):
        return self.base(x) + self.adapter(x)


def build():
    torch.manual_seed(0)
    return LoRAModel().eval(), (torch.randn(2, 16),)
