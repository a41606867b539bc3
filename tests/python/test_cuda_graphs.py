"""The safe setting where people serve (issue 41): ``gp.compile(model, "watch_state")`` on
Inductor, with and without CUDA graphs (``mode="reduce-overhead"``), catches every change made
after warm-up, through direct dispatch, on a decoder block with a KV cache of its own.

Each case runs on the CPU everywhere (where ``reduce-overhead`` compiles without CUDA graphs:
Inductor skips them for CPU tensors) and on CUDA where a device is present; on a machine
without one the CUDA cases are skipped, by name, with the reason (``pytest -rs``). With CUDA
graphs an output is overwritten by the next replay, so each is cloned before it is compared.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import guardpolicy as gp

DEVICES = [pytest.param("cpu", marks=pytest.mark.soak),  # Inductor compiles: make test's alone, not each leg's
           pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                          reason="no CUDA device on this machine"))]
MODES = [None, "reduce-overhead"]


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.attn = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
        self.norm = nn.LayerNorm(width)
        self.scaling = 0.5

    def forward(self, x):
        return x + self.mlp(self.norm(x + self.attn(x) * self.scaling))


class Decoder(nn.Module):
    """Embeddings, three blocks and a head; ``cache`` (a buffer) holds the last hidden state
    and is written in place on every call, as a KV cache is."""

    def __init__(self, width: int = 16, vocab: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(3))
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("cache", torch.zeros(1, width))

    def forward(self, ids):
        x = self.embed(ids) + self.cache
        for layer in self.layers:
            x = layer(x)
        self.cache.copy_(x[-1:].detach())
        return self.head(x)


def changes(model: Decoder, device: str) -> list:
    """(what, change) made after warm-up, each one torch's recipe serves stale."""
    width = model.embed.embedding_dim

    def swap_mlp():
        model.layers[1].mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(),
                                            nn.Linear(2 * width, width)).to(device)

    def new_weight():
        model.head.weight = nn.Parameter(torch.randn_like(model.head.weight))

    return [("a forward hook on layers[0].mlp", lambda: model.layers[0].mlp.register_forward_hook(
                lambda m, a, out: out * 2)),
            ("layers[2].scaling changed", lambda: setattr(model.layers[2], "scaling", -1.0)),
            ("scaling to 0", lambda: setattr(model.layers[0], "scaling", 0.0)),
            ("a submodule swapped", swap_mlp),
            ("a parameter replaced", new_weight),
            ("a weight's values changed in place", lambda: model.layers[1].attn.weight.mul_(-1)),
            ("the hook's handle gone", lambda: model.layers[0].mlp._forward_hooks.clear())]


def step(compiled, model, ids, reference):
    """One call of each, compiled first, from the same cache; the compiled output cloned."""
    cache = model.cache.clone()
    got = compiled(ids).clone()
    model.cache.copy_(cache)
    return got, reference(ids)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_every_change_after_warm_up_is_caught(device, mode):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Decoder().to(device).eval()
    compiled = gp.compile(model, "watch_state", mode=mode)
    ids = torch.tensor([1, 5, 7], device=device)
    tol = {"rtol": 1e-4, "atol": 1e-4}  # Inductor's fused kernels against eager's; a stale output is off by far more
    with torch.no_grad():
        for _ in range(12):
            torch.testing.assert_close(*step(compiled, model, ids, model), **tol)
        stats = gp.stats(compiled)
        assert stats.dispatch is not None and stats.compiles == 1
        made = changes(model, device)
        for what, change in made:
            change()
            for _ in range(3):
                got, want = step(compiled, model, ids, model)
                torch.testing.assert_close(got, want, msg=lambda m, w=what: f"after {w}: {m}", **tol)
    assert gp.stats(compiled).watches.rechecks > len(made)
