"""A ViT-like classifier: a patch-embedding conv (4×4 patches), a class token and learned
position embeddings, two pre-norm encoder blocks (``LayerNorm``, ``nn.MultiheadAttention``,
a GELU MLP) and a ``LayerNorm`` + ``Linear`` head. Input: ``(2, 3, 16, 16)`` float32."""

import torch
from torch import nn


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViTLike(nn.Module):
    def __init__(self, image: int = 16, patch: int = 4, dim: int = 32, depth: int = 2, heads: int = 4,
                 classes: int = 10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def build():
    torch.manual_seed(0)
    return ViTLike().eval(), (torch.randn(2, 3, 16, 16),)
