"""A small decoder of the kind people serve, for the audit tests: token and position
``nn.Embedding`` (the token one with ``max_norm=None``: the audit's ``None -> value`` change
makes eager renormalise its weights in place), LoRA-style ``lora_scale`` floats, the KV
caches as inputs written in place at ``pos``, and a module-level config dict."""

import torch
from torch import nn

DECODER_CONFIG = {"rope": False, "logit_scale": 1.0}


class LoRALinear(nn.Module):
    def __init__(self, width: int, rank: int = 4):
        super().__init__()
        self.base = nn.Linear(width, width)
        self.lora_a = nn.Linear(width, rank, bias=False)
        self.lora_b = nn.Linear(rank, width, bias=False)
        nn.init.normal_(self.lora_b.weight, std=0.1)
        self.lora_scale = 0.5

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.lora_scale


class Layer(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.q = LoRALinear(width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def forward(self, h, k_cache, v_cache, pos):
        q = self.q(h)
        k, v = self.kv(h).chunk(2, dim=-1)
        k_cache[:, pos] = k[:, 0]  # one new token, written in place
        v_cache[:, pos] = v[:, 0]
        att = torch.softmax(q @ k_cache[:, : pos + 1].transpose(1, 2) / k.shape[-1] ** 0.5, dim=-1)
        return h + self.out(att @ v_cache[:, : pos + 1])


class Decoder(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, depth: int = 2, max_len: int = 16):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_len, width)
        self.layers = nn.ModuleList(Layer(width) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens, caches, pos: int):
        h = self.tok(tokens) + self.pos(torch.full_like(tokens, pos))
        if DECODER_CONFIG["rope"]:
            h = h * 0.5
        for layer, (k_cache, v_cache) in zip(self.layers, caches):
            h = layer(h, k_cache, v_cache, pos)
        return self.head(h) * DECODER_CONFIG["logit_scale"]


def caches(depth: int = 2, batch: int = 1, max_len: int = 16, width: int = 32):
    return [(torch.zeros(batch, max_len, width), torch.zeros(batch, max_len, width)) for _ in range(depth)]


def build():
    torch.manual_seed(0)
    model = Decoder().eval()
    return model, (torch.tensor([[3]]), caches(), 2)
