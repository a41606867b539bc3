"""The harness of test_watch_runtime_changes.py and test_watch_runtime_gate.py: the rules
``suggest`` ends every policy with, nothing dropped (``WATCH``, the fixture ``policy``); a conv
net with BatchNorm and Dropout (``Net``) whose forward reads a config object (``CONFIG``), a
module global (``GAIN``), a class attribute and a method of ``Block``; ``_check`` (the call
after a change against eager's on a copy of the model), ``_changes`` (the net's changes, in
the order applied) and the fixture ``restore_globals``, which undoes what they changed. The
changes set this module's globals, which ``Net`` reads, so they live here with it; the test
files bind the fixtures by name (``policy = watch_runtime_harness.policy``)."""

from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

import guardpolicy as gp
from guardpolicy.tools.suggest import render

#: The rules ``suggest`` ends every policy with (render.watched_lines), nothing dropped.
WATCH = "guardpolicy 1\n\npolicy watched {\n" + "\n".join(render.watched_lines()) + "\n  default watch\n}\n"

CONFIG = types.SimpleNamespace(scale=1.0)  # a config object the forward reads
GAIN = 1.0  # a module global the forward reads


class Block(nn.Module):
    shift = 0.0  # a class attribute the forward reads

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.drop = nn.Dropout(0.5)

    def act(self, x):
        return torch.relu(x)

    def forward(self, x):
        return self.act(self.drop(self.bn(self.conv(x)))) + self.shift


class Net(nn.Module):
    def __init__(self, channels: int = 4):
        super().__init__()
        self.config = CONFIG
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.block = Block(channels)
        self.head = nn.Linear(channels, 5)
        self.register_buffer("offset", torch.zeros(channels))

    def forward(self, x):
        y = self.block(self.stem(x)) * self.config.scale * GAIN
        y = y + self.offset.view(1, -1, 1, 1)
        return self.head(y.mean((2, 3)))


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "watched.gpol"
    path.write_text(WATCH)
    return gp.load(path)


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def _check(compiled, model, x, what: str) -> None:
    """One call after a change: equal to eager's on a copy of the model as it is now (the
    copy's BatchNorm updates its own statistics in ``train()``), under the same seed; where
    eager raises, the compiled call must raise too."""
    reference = copy.deepcopy(model)
    torch.manual_seed(7)
    try:
        expected = reference(x)
    except RuntimeError as error:  # eager refuses the change: so must the compiled model
        with pytest.raises(type(error)):
            compiled(x)
        return
    torch.manual_seed(7)
    got = compiled(x)
    torch.testing.assert_close(got, expected, msg=lambda m: f"after {what}: {m}")


def _changes():
    """(what, change(model) -> the next input or None for the same) in the order applied."""
    global GAIN

    def hook_on(model):
        model.hooks = [model.block.conv.register_forward_hook(lambda m, a, out: out * 2),
                       model.head.register_forward_pre_hook(lambda m, args: (args[0] + 1,))]

    def hooks_off(model):
        for h in model.hooks:
            h.remove()

    def global_hook_on(model):
        model.global_hook = nn.modules.module.register_module_forward_hook(
            lambda m, a, out: out * 3 if isinstance(m, nn.Linear) else out)

    def set_gain(value):
        def change(model):
            global GAIN
            GAIN = value
        return change

    def patch_act(model):
        Block.act = lambda self, x: torch.sigmoid(x)

    return [
        ("a forward hook and a pre-hook on submodules", hook_on),
        ("the hooks removed", hooks_off),
        ("a global forward hook", global_hook_on),
        ("the global hook removed", lambda m: m.global_hook.remove()),
        ("a config attribute", lambda m: setattr(CONFIG, "scale", 2.0)),
        ("a module global", set_gain(0.5)),
        ("a class attribute", lambda m: setattr(Block, "shift", 1.0)),
        ("a monkeypatched method", patch_act),
        ("a buffer replaced, same shape", lambda m: setattr(m, "offset", torch.ones(4))),
        ("param.data = another tensor, same shape", lambda m: setattr(m.head.weight, "data", torch.ones(5, 4))),
        (".train()", lambda m: m.train()),
        (".eval()", lambda m: m.eval()),
        ("a submodule of another class", lambda m: setattr(m.block, "drop", nn.Identity())),
        ("channels_last", lambda m: m.to(memory_format=torch.channels_last)),
        ("a buffer of another shape", lambda m: setattr(m, "offset", torch.ones(1))),
        ("param.data = another dtype", lambda m: setattr(m.head.bias, "data", torch.zeros(5, dtype=torch.float64))),
    ]


@pytest.fixture
def restore_globals():
    yield
    global GAIN
    GAIN = 1.0
    CONFIG.scale = 1.0
    Block.shift = 0.0
    if "act" in vars(Block) and Block.act.__name__ == "<lambda>":
        Block.act = _ACT


_ACT = Block.act
