"""A list the forward appends to, and the output depends on its length."""

import torch


class History(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.seen = []

    def forward(self, x):
        self.seen.append(1)
        return self.proj(x) * len(self.seen)


def build():
    return History().eval(), (torch.randn(2, 8),)


def run(compiled, model):
    x = torch.randn(2, 8)
    for _ in range(12):
        compiled(x)
