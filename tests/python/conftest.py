"""Shared fixtures for the guardpolicy pytest suite.

* ``capture_entries(fn, *args)`` compiles ``fn`` with ``backend="eager"`` and a recording
  ``guard_filter_fn`` that keeps everything, and returns the ``GuardFilterEntry`` objects
  torch offered (every compiled frame, in order).
* Three real models, each a ``Model(name, fn, args)``: an MLP (Linear + LayerNorm + a float
  attribute + a registered buffer), a plain function reading a module-level global int, and
  a tiny random-weight transformers GPT-2 (nothing is downloaded).
* ``model_entries``: the entries of the three models, captured once per session.
* ``example_plugins``: the two example plugins (``names``, ``modinfo``) loaded into this
  process, once (``guardpolicy.load_plugin`` is process-global and a plugin name loads only
  once per process); the example policies that read their fields need them.

Dynamo's caches are reset before and after every test (autouse ``_reset_dynamo``).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import Any, Callable

import pytest
import torch
import torch._dynamo

import guardpolicy as gp

# torch's structured-trace logger is meant never to propagate (torch/_logging/_internal.py);
# under pytest's log capture it would flood every failure report with empty DEBUG lines.
logging.getLogger("torch.__trace").propagate = False

# --------------------------------------------------------------------------- capture


def capture_entries(fn: Callable, *args: Any, **compile_kwargs: Any) -> list:
    """Compiles ``fn`` (backend="eager"), calls it once on ``args`` and returns every
    GuardFilterEntry torch passed to guard_filter_fn. The recording filter keeps all."""
    recorded: list = []

    def record_all(entries):
        recorded.extend(entries)
        return [True] * len(entries)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(fn, backend="eager", options={"guard_filter_fn": record_all}, **compile_kwargs)
        with torch.no_grad():
            compiled(*args)
    finally:
        torch._dynamo.reset()
    assert recorded, "torch offered no guard entries"
    return recorded


def compile_with(fn: Callable, guard_filter_fn: Callable | None, **compile_kwargs: Any) -> Callable:
    """``torch.compile(fn, backend="eager")`` with ``guard_filter_fn`` (None: no filter). A
    fresh options dict per call: torch.compile pops the key out of the dict it is given."""
    options = {"guard_filter_fn": guard_filter_fn} if guard_filter_fn is not None else None
    return torch.compile(fn, backend="eager", options=options, **compile_kwargs)


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# --------------------------------------------------------------------------- models


@dataclasses.dataclass
class Model:
    name: str
    fn: Callable
    args: tuple


class MLP(torch.nn.Module):
    """Linear + LayerNorm (built-in modules), a float attribute and a registered buffer."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.scale = 0.5
        self.register_buffer("offset", torch.linspace(0.0, 1.0, 8))

    def forward(self, x):
        return torch.relu(self.norm(self.fc(x))) * self.scale + self.offset


GLOBAL_INT = 3


def add_global_int(x):
    """A plain function reading the module-level global ``GLOBAL_INT``."""
    return x * 2 + GLOBAL_INT


def make_mlp() -> Model:
    torch.manual_seed(0)
    return Model("mlp", MLP().eval(), (torch.randn(4, 8),))


def make_global_fn() -> Model:
    return Model("global_fn", add_global_int, (torch.arange(6.0),))


def make_gpt2() -> Model:
    from transformers import GPT2Config, GPT2Model
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the tiny vocab makes the config warn about token ids
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64)
    model = GPT2Model(config).eval()
    input_ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    return Model("gpt2", model, (input_ids,))


MODEL_FACTORIES = {"mlp": make_mlp, "global_fn": make_global_fn, "gpt2": make_gpt2}
MODEL_NAMES = tuple(MODEL_FACTORIES)


@pytest.fixture
def mlp_model() -> Model:
    return make_mlp()


@pytest.fixture
def global_fn_model() -> Model:
    return make_global_fn()


@pytest.fixture
def gpt2_model() -> Model:
    return make_gpt2()


@pytest.fixture(scope="session")
def model_entries() -> dict[str, list]:
    """{model name: the GuardFilterEntry list torch offered when compiling it}, captured
    once per session (the models are kept alive through the entries' values)."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, factory in MODEL_FACTORIES.items():
            model = factory()
            out[name] = capture_entries(model.fn, *model.args)
    return out


@pytest.fixture
def capture():
    """The ``capture_entries`` helper as a fixture."""
    return capture_entries


@pytest.fixture(scope="session")
def std_policies() -> dict[str, gp.Policy]:
    return {name: gp.load_std(name) for name in gp.STD_POLICIES}


#: The example plugins in the order the ``example_plugins`` fixture loads them.
EXAMPLE_PLUGIN_ORDER = ("names", "modinfo")


@pytest.fixture(scope="session")
def example_plugins() -> dict[str, gp.PluginInfo]:
    """{name: PluginInfo} of the example plugins, loaded into this process once. Plugins
    cannot be unloaded, so every test that loads plugins in-process goes through here;
    anything else (broken plugins, other configurations) runs in a subprocess."""
    loaded = {p.name: p for p in gp.plugins()}
    return {
        name: loaded[name] if name in loaded else gp.load_plugin(gp.example_plugin_path(name))
        for name in EXAMPLE_PLUGIN_ORDER
    }
