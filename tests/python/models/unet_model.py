"""A small UNet-like denoiser, called as diffusion pipelines call theirs: ``model(sample,
timestep, scale=...)``. A sinusoidal timestep embedding and an MLP, a down path and an up path
of conv–``GroupNorm``–SiLU residual blocks with the embedding added, a skip connection, and
``scale`` (a float passed per call, like a guidance or LoRA scale) weighting the up path's
skip. Input: ``(2, 4, 16, 16)`` float32, ``timestep`` a ``(2,)`` int64 tensor."""

import math

import torch
from torch import nn


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = t.float()[:, None] * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int, groups: int = 4):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(nn.functional.silu(self.norm1(x)))
        h = h + self.temb(emb)[:, :, None, None]
        h = self.conv2(nn.functional.silu(self.norm2(h)))
        return h + self.skip(x)


class UNetLike(nn.Module):
    def __init__(self, channels: int = 4, width: int = 16, temb: int = 32):
        super().__init__()
        self.temb_dim = temb
        self.time_mlp = nn.Sequential(nn.Linear(temb, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(channels, width, 3, padding=1)
        self.down = ResBlock(width, width, temb)
        self.downsample = nn.Conv2d(width, width, 3, stride=2, padding=1)
        self.mid = ResBlock(width, 2 * width, temb)
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.up = ResBlock(3 * width, width, temb)
        self.norm_out = nn.GroupNorm(4, width)
        self.conv_out = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, sample, timestep, scale: float = 1.0):
        emb = self.time_mlp(timestep_embedding(timestep, self.temb_dim))
        h0 = self.conv_in(sample)
        h1 = self.down(h0, emb)
        h = self.mid(self.downsample(h1), emb)
        h = self.up(torch.cat([self.upsample(h), h1 * scale], dim=1), emb)
        return self.conv_out(nn.functional.silu(self.norm_out(h)))


def build():
    torch.manual_seed(0)
    return UNetLike().eval(), (torch.randn(2, 4, 16, 16), torch.tensor([10, 500])), {"scale": 0.7}
