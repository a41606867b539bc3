"""Regional compilation under ``default watch``: blocks of one class compiled one by one
(``gp.compile`` per block, as ``layer.compile()`` per layer) share one code object and one
cache entry, whose gate keeps a state per block (``watch.STATES_PER_ENTRY``), so past the
warm-up no call is rechecked, however many blocks; a change to one block is still seen.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.utils.prune
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


class Stack(nn.Module):
    """Twelve ``Block``s and a head; ``_repeated_blocks`` names the block class, as diffusers'
    ``ModelMixin`` subclasses do."""

    _repeated_blocks = ["Block"]

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(12))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _eager(model, x):
    """``model`` without its blocks' compiled calls."""
    saved = [b.__dict__.pop("_compiled_call_impl") for b in model.blocks]
    try:
        return model(x)
    finally:
        for block, compiled in zip(model.blocks, saved):
            block._compiled_call_impl = compiled


def _graphs(compile_blocks, backend):
    """Graphs compiled for a ``Stack`` whose blocks ``compile_blocks`` compiled, over 10 calls."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = Stack().eval()
    compile_blocks(model, backend)
    with torch.no_grad():
        for _ in range(10):
            model(torch.randn(2, 8))
    return torch._dynamo.utils.counters["stats"]["unique_graphs"], model


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_repeated_blocks_compiled_in_place_keep_the_module_tree_and_share_a_graph(backend):
    """``gp.compile_repeated_blocks``: each block compiled where it is, as ``block.compile()``
    (state-dict keys unchanged), with the policy on every block (a shared ``options`` dict
    would carry it to the first only), and as few graphs as ``torch.compile``'s."""
    plain, _ = _graphs(lambda m, be: [b.compile(backend=be) for b in m.blocks], backend)
    keys = list(Stack().state_dict())
    graphs, model = _graphs(lambda m, be: gp.compile_repeated_blocks(m, "watch_state", backend=be), backend)
    assert graphs <= plain and list(model.state_dict()) == keys
    assert all(gp.stats(b).policy.name == "watch_state" for b in model.blocks)
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(x), _eager(model, x))
        model.blocks[5].scale = -1.0
        torch.testing.assert_close(model(x), _eager(model, x), msg=lambda m: f"after blocks[5].scale: {m}")
        handle = model.blocks[3].register_forward_hook(lambda m, a, out: out * 0)
        torch.testing.assert_close(model(x), _eager(model, x), msg=lambda m: f"after a hook on blocks[3]: {m}")
        handle.remove()
        torch.testing.assert_close(model(x), _eager(model, x), msg=lambda m: f"after the hook removed: {m}")


class Scale:
    """A forward pre-hook object: the input times ``s``."""

    def __init__(self, s):
        self.s = s

    def __call__(self, module, args):
        return (args[0] * self.s,)


def _scaled(s):
    return lambda module, args: (args[0] * s,)


HOOKS = {"object": Scale, "lambda": _scaled,
         "prune": lambda s: torch.nn.utils.prune.l1_unstructured if s == 1.0 else torch.nn.utils.prune.random_unstructured}


def _hook_blocks(model, kind):
    """A hook object of its own on every block's ``lin``: two values taking turns (an object,
    a lambda closing over the value, or ``prune``'s hook of two methods)."""
    for i, block in enumerate(model.blocks):
        make = HOOKS[kind](1.0 + i % 2)
        if kind == "prune":
            make(block.lin, "weight", amount=0.3)
        else:
            block.lin.register_forward_pre_hook(make)


@pytest.mark.parametrize("kind", list(HOOKS))
def test_blocks_each_with_a_hook_object_of_its_own_share_graphs_as_under_torch_compile(kind):
    """A hook object per block compiles as few graphs as ``torch.compile`` (which guards a hook
    part by part: its class or code, the attributes or cells it reads), not one per block
    past torch's recompile limit; a hook's value changed or a hook replaced is seen."""
    def blocks(m, be):
        _hook_blocks(m, kind)
        return [b.compile(backend=be) for b in m.blocks]

    def gp_blocks(m, be):
        _hook_blocks(m, kind)
        return gp.compile_repeated_blocks(m, "watch_state", backend=be)
    plain, _ = _graphs(blocks, "eager")
    graphs, model = _graphs(gp_blocks, "eager")
    assert graphs == plain == 2
    assert not [b for b in model.blocks if gp.stats(b).eager_fallbacks]
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(x), _eager(model, x))
        if kind != "prune":
            hooks = model.blocks[4].lin._forward_pre_hooks
            key = next(iter(hooks))
            if kind == "object":
                hooks[key].s = -2.0
                torch.testing.assert_close(model(x), _eager(model, x), msg=lambda m: f"after a hook's s changed: {m}")
            hooks[key] = HOOKS[kind](5.0)
            torch.testing.assert_close(model(x), _eager(model, x), msg=lambda m: f"after a hook replaced: {m}")
        else:
            model.blocks[4].lin.weight_mask.zero_()
            torch.testing.assert_close(model(x), _eager(model, x), msg=lambda m: f"after a mask zeroed: {m}")


def test_compiling_in_place_needs_a_module_and_repeated_blocks():
    with pytest.raises(TypeError, match="compiles an nn.Module where it is, not a function"):
        gp.compile(lambda x: x, "watch_state", inplace=True)
    with pytest.raises(ValueError, match="has no `_repeated_blocks`"):
        gp.compile_repeated_blocks(Block(), "watch_state")
    with pytest.raises(ValueError, match="no submodule of Stack is of a class in _repeated_blocks"):
        gp.compile_repeated_blocks(type("Stack", (Stack,), {"_repeated_blocks": ["Missing"]})(), "watch_state")
