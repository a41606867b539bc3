"""A step counter the forward increments; the output does not depend on it."""

import torch


class Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.step = 0

    def forward(self, x):
        self.step += 1
        return self.proj(x)


def build():
    return Counted().eval(), (torch.randn(2, 8),)


def run(compiled, model):
    x = torch.randn(2, 8)
    for _ in range(20):
        compiled(x)
