"""The small models whose guards the docs and the example policies name.

Every guard name (and `path`) the docs show must be one torch really produces: these models
are compiled by docs/tools/capture_snapshots.py, which writes their snapshots to
docs/snapshots/, and the docs test (docs/tools/docs_test.py) checks every name a policy in
the docs compares against those snapshots. The module-level names below are the globals the
docs name (`G['FLAGS'].fast`, `G['CONFIG_TOP_K']`, ...): rename one and the docs must follow.

``MODELS``: {snapshot name: builder() -> (fn, args)}. Importing this module imports torch.
"""

from __future__ import annotations

import types

import torch
from torch import nn

# --------------------------------------------------------------------------- serving

#: Feature flags and settings fixed at start-up (policies/examples/serving.gpol).
FLAGS = types.SimpleNamespace(fast=True)
CONFIG_TOP_K = 2
temperature = 1.0


class Serving(nn.Module):
    """Two Linear layers, reading a flag, a config constant and a global temperature."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if FLAGS.fast:
            h = h * CONFIG_TOP_K
        return self.fc2(h) / temperature


def build_serving():
    torch.manual_seed(0)
    return Serving().eval(), (torch.randn(4, 8),)


# --------------------------------------------------------------------------- config globals

#: Module-level configuration (policies/examples/drop_config_globals.gpol).
BATCH_SIZE = 4
batch_size = 4
CFG = types.SimpleNamespace(size=2)
TORCH = torch


def config_fn(x, BATCH_SIZE):  # noqa: N803 - a local that shadows the global's name
    y = TORCH.relu(x) * _global_batch() + batch_size * CFG.size
    return y * BATCH_SIZE


def _global_batch():
    """The global BATCH_SIZE (config_fn's local of that name shadows it)."""
    return BATCH_SIZE


def build_config():
    torch.manual_seed(0)
    return config_fn, (torch.randn(4, 8), 3)


# --------------------------------------------------------------------------- nested modules

#: A module-level int (policies/std/skip_guard_on_globals.gpol).
GLOBAL_INT = 3


class Inner(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.register_buffer("c", torch.ones(width))

    def forward(self, x):
        return x + self.c


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = Inner(8)

    def forward(self, x):
        return self.b(x)


class Nested(nn.Module):
    """Built-in and user submodules, a ModuleList, a float and an int attribute, a buffer
    two modules down and a global int (policies/examples/shallow_guards.gpol and the std
    policies' tests)."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList([nn.Linear(width, width), nn.Linear(width, width)])
        self.a = Outer()
        self.scale = 1.0
        self.c = 2

    def forward(self, x):
        h = self.norm(self.fc(x)) * self.scale + self.c
        for layer in self.layers:
            h = layer(h)
        return self.a(h) * GLOBAL_INT


def build_nested():
    torch.manual_seed(0)
    return Nested().eval(), (torch.randn(4, 8),)


MODELS = {"serving": build_serving, "config": build_config, "nested": build_nested}
