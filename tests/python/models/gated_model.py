"""Layer skipping by an int attribute (``self.layers[: self.n_active]``) and a sampling-style
branch on a float attribute (``if self.temperature > 0``): the boundary values of each
(``n_active`` -> 1, ``temperature`` -> 0.0) change the output where one step up does not.
``mode == "exact"`` is a change the audit cannot guess (it tries two other strings): only
verify catches it."""

import torch
from torch import nn


class Gated(nn.Module):
    def __init__(self, width: int = 16, depth: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.n_active = depth
        self.temperature = 1.0
        self.mode = "fast"  # a string: the audit tries two other values, never "exact"

    def forward(self, x):
        for layer in self.layers[: self.n_active]:
            x = torch.tanh(layer(x))
        if self.mode == "exact":
            x = x * 2
        if self.temperature > 0:
            return torch.softmax(x / self.temperature, dim=-1)
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).to(x.dtype)


def build():
    torch.manual_seed(0)
    return Gated().eval(), (torch.randn(2, 16),)
