"""Regional compilation under ``default watch``: blocks of one class compiled one by one
(``gp.compile`` per block, as ``layer.compile()`` per layer) share one code object and one
cache entry, whose gate keeps a state per block (``watch.STATES_PER_ENTRY``), so past the
warm-up no call is rechecked, however many blocks; a change to one block is still seen.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import guardpolicy as gp
from guardpolicy.runtime import watch

POLICY = "guardpolicy 1\n\npolicy w {\n  dispatch direct\n  default watch\n}\n"
FREE = POLICY.replace("  default watch", "  config install_free_tensors = true\n  default watch")


class Block(nn.Module):
    """``relu(lin(x)) * scale + x``, ``x`` of shape ``(2, 8)``."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.scale = 1.0

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale + x


def _run(fns, x):
    for fn in fns:
        x = fn(x)
    return x


@pytest.mark.parametrize("policy", [POLICY, FREE], ids=["watch", "watch + free tensors"])
def test_blocks_compiled_one_by_one_keep_a_state_each(policy):
    """With free tensors, each of the first ``watch.INSTANCES_WITH_FREE_TENSORS`` blocks gets a
    graph of its own tensors, and the code's later compiles pass them as graph inputs
    (``watch.MOVED_TENSORS``): a few graphs, not one per block past torch's recompile limit."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    blocks = [Block() for _ in range(12)]  # more than torch's recompile_limit (8)
    assert len(blocks) < watch.STATES_PER_ENTRY
    compiled = [gp.compile(b, gp.load(policy), backend="eager") for b in blocks]
    x = torch.randn(2, 8)
    with torch.no_grad():
        for _ in range(10):
            _run(compiled, x)
        before = sum(gp.stats(c).watches.rechecks for c in compiled)
        for _ in range(20):
            torch.testing.assert_close(_run(compiled, x), _run(blocks, x))
        assert sum(gp.stats(c).watches.rechecks for c in compiled) == before  # every block served by its state
        assert sum(gp.stats(c).compiles for c in compiled) <= watch.INSTANCES_WITH_FREE_TENSORS + 1  # not one per block
        assert not [c for c in compiled if gp.stats(c).eager_fallbacks]
        blocks[7].scale = -1.0
        torch.testing.assert_close(_run(compiled, x), _run(blocks, x), msg=lambda m: f"after blocks[7].scale: {m}")
        blocks[0].lin.register_forward_hook(lambda m, a, out: out * 3)
        torch.testing.assert_close(_run(compiled, x), _run(blocks, x), msg=lambda m: f"after a hook on blocks[0]: {m}")
