"""A user-style model for the audit tests: a diffusion-style block stack whose forward takes
a ``transformer_options`` dict (a float, a bool, a string and an optional entry) beside its
tensor input, and reads float module attributes (``self.scale``, ``attn.temperature``)."""

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.temperature = 1.0

    def forward(self, x, options):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(-2, -1)) / (self.temperature * x.shape[-1] ** 0.5)
        if options["causal"]:
            mask = torch.ones(x.shape[-2], x.shape[-2], dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        return self.out(scores.softmax(-1) @ v)


class OptionsModel(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attn = Attention(width)
        self.head = nn.Linear(width, width)
        self.scale = 0.5

    def forward(self, x, transformer_options):
        h = x + self.attn(self.norm(x), transformer_options) * self.scale
        h = h * transformer_options["strength"]
        if transformer_options["mode"] == "residual":
            h = h + x
        if transformer_options["extra"] is not None:
            h = h + transformer_options["extra"]
        return self.head(h)


def build():
    torch.manual_seed(0)
    model = OptionsModel().eval()
    x = torch.randn(2, 8, 32)
    options = {"strength": 1.0, "causal": True, "mode": "residual", "extra": None}
    return model, (x, options)
