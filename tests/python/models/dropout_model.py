"""A model left in ``train()`` mode: ``nn.Dropout`` and ``torch.rand_like`` in forward. Two
eager calls agree only under the same seed; the audit runs every call under a fixed one."""

import torch
from torch import nn


class Noisy(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.drop = nn.Dropout(0.25)
        self.noise = 0.1

    def forward(self, x):
        h = self.drop(torch.relu(self.fc(x)))
        return h + torch.rand_like(h) * self.noise


def build():
    torch.manual_seed(0)
    return Noisy().train(), (torch.randn(4, 16),)
