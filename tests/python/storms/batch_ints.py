"""A storm of the serving-runner kind: the runner sets the number of live tokens on the
module per batch, and the forward counts its own steps."""

import torch


class Runner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.num_tokens = 4
        self.steps = 0

    def forward(self, x):
        self.steps += 1
        return self.proj(x[: self.num_tokens])


def build():
    return Runner().eval(), (torch.randn(16, 8),)


def run(compiled, model):
    x = torch.randn(16, 8)
    for i in range(20):
        model.num_tokens = 4 + i % 10
        compiled(x)
