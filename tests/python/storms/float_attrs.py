"""A float attribute set per step that the graph specializes on: the attention scale a
scheduler changes every step (scaled_dot_product_attention takes it as a Python float)."""

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.scale = 0.125

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, 1, -1, 24).chunk(3, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, scale=self.scale)


def build():
    return Attention().eval(), (torch.randn(4, 8),)


def run(compiled, model):
    x = torch.randn(4, 8)
    for i in range(20):
        model.scale = 0.125 + 0.01 * i
        compiled(x)
