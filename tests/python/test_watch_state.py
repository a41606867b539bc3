"""The safe setting in one line (issue 41): ``gp.compile(model, "watch_state")`` loads the
standard policy ``watch_state`` (policies/std/watch_state.gpol: nothing dropped, the inputs and
what no watcher sees kept, the rest watched, free tensors, direct dispatch), and catches the
changes made after warm-up that torch's recipe serves stale.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import guardpolicy as gp
from config_models import Config, Scaled
from guardpolicy.tools.suggest import render


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.scale = 1.0

    def forward(self, x):
        return self.norm(self.lin(x)) * self.scale


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_its_keep_rules_are_the_ones_suggest_writes():
    text = gp.std_policy_path("watch_state").read_text()
    for line in render.watched_lines():
        assert line in text.splitlines()
    policy = gp.load_std("watch_state")
    assert policy.dispatch == "direct" and not policy.is_unsafe and policy.default_decision == "watch"
    assert policy.config == {"install_free_tensors": True}
    assert "watch_state" in gp.SAFE_POLICIES and "watch_state" not in gp.STD_POLICIES


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.soak)])
def test_one_line_catches_what_torchs_recipe_serves_stale(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Stack().eval()
    compiled = gp.compile(model, "watch_state", backend=backend)
    x = torch.randn(2, 4)
    changes = [
        ("a forward hook on a layer", lambda: model.layers[1].lin.register_forward_hook(lambda m, a, out: out * 3)),
        ("an attribute of a layer", lambda: setattr(model.layers[2], "scale", -1.0)),
        ("a parameter replaced", lambda: setattr(model.layers[0].lin, "weight", nn.Parameter(torch.randn(4, 4)))),
        ("a layer swapped", lambda: model.layers.__setitem__(1, Block())),
    ]
    with torch.no_grad():
        for _ in range(10):
            torch.testing.assert_close(compiled(x), model(x))
        stats = gp.stats(compiled)
        assert stats.watches.frames and stats.dispatch is not None
        for what, change in changes:
            change()
            torch.testing.assert_close(compiled(x), model(x), msg=lambda m, w=what: f"after {w}: {m}")
            for _ in range(3):
                torch.testing.assert_close(compiled(x), model(x))


class Shared(nn.Module):
    """Two layers holding one config object, as transformers' layers hold the model's: torch
    guards the second path with a ``DUPLICATE_INPUT`` (``a.config is b.config``), not with its
    own value guards."""

    def __init__(self):
        super().__init__()
        self.config = Config(2.0)
        self.a, self.b = Scaled(self.config), Scaled(self.config)

    def forward(self, x):
        return self.b(self.a(x)) + self.config.scale


@pytest.mark.parametrize("path", ["a", "b", "root"])
def test_a_shared_config_replaced_on_either_path_is_caught(path):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Shared().eval()
    compiled = gp.compile(model, "watch_state", backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(10):
            torch.testing.assert_close(compiled(x), model(x))
        duplicates = [e for f in gp.stats(compiled).explanations for e in f if e.guard_type == "DUPLICATE_INPUT"]
        assert duplicates and all(e.watched and not e.checked for e in duplicates)
        rechecks = gp.stats(compiled).watches.rechecks
        owner = model if path == "root" else getattr(model, path)
        shared = owner.config
        for config in (Config(-3.0), Config(0.0), shared):  # one path apart, at 0, and shared again
            owner.config = config
            torch.testing.assert_close(compiled(x), model(x))
            assert gp.stats(compiled).watches.rechecks > rechecks
            rechecks = gp.stats(compiled).watches.rechecks
            for _ in range(3):
                torch.testing.assert_close(compiled(x), model(x))


def test_the_tools_take_it_by_name_where_they_take_a_policy_file(tmp_path, monkeypatch):
    import argparse

    from guardpolicy.tools.audit.run import resolve_policy
    from guardpolicy.tools.bench.command import _load_policies

    monkeypatch.chdir(tmp_path)  # no file of that name here
    label, source, policy = resolve_policy("watch_state")
    assert (label, source, policy.name) == ("watch_state", "watch_state", "watch_state")
    [(spec, loaded)] = _load_policies(argparse.ArgumentParser(), ["watch_state"])
    assert spec == "watch_state" and loaded.default_decision == "watch" and not loaded.is_unsafe
    with pytest.raises(SystemExit):  # torch's unsafe filters stay explicit: a file or load_std
        _load_policies(argparse.ArgumentParser(), ["skip_all_guards"])
