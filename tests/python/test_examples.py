"""The example policies in policies/examples/: they load, lint clean, their `test` blocks
hold, and they behave as documented under torch.compile.

Some examples read fields of the example plugins (module_kinds.gpol: modinfo,
shallow_guards.gpol: names), so every test here runs with both loaded; test_plugins_modinfo.py
and test_plugins_names.py run those two on real models."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from conftest import compile_with

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.gpol"))

# module_kinds.gpol and shallow_guards.gpol need the example plugins loaded.
pytestmark = pytest.mark.usefixtures("example_plugins")

SERVING_GLOBAL_PATTERN = r"^G\['(FLAGS|SETTINGS|CONFIG_[A-Z0-9_]+)'\]"


def test_examples_present():
    assert {p.name for p in EXAMPLE_FILES} >= {"serving.gpol", "drop_config_globals.gpol", "module_kinds.gpol",
                                               "shallow_guards.gpol"}


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_loads_and_lints_clean(path):
    diags = gp.lint(path)
    assert [d for d in diags if d.severity == "error"] == []
    assert diags == [], [d.rendered for d in diags]  # not even a warning
    policy = gp.load(path)
    assert policy.name == path.stem
    # A policy that can drop a guard is `unsafe` (the checker enforces it); keep_all cannot.
    can_drop = policy.default_decision == "drop" or any(r.decision == "drop" for r in policy.rules)
    assert policy.is_unsafe == can_drop and policy.doc


# --------------------------------------------------------------------------- test blocks

_EXPECT = re.compile(r"expect\s+(keep|drop)\s*\{(.*?)\}\s*$", re.M)
_FIELD = re.compile(r'\s*([A-Za-z_][\w.]*)\s*:\s*("(?:[^"\\]|\\.)*"|true|false|-?\d+)\s*')


def parse_expectations(text: str) -> list[tuple[bool, dict]]:
    """`expect keep|drop { field: literal, ... }` lines of the file's test blocks (the
    examples keep one expectation per line and no commas inside strings)."""
    out = []
    for decision, body in _EXPECT.findall(text):
        row = {}
        for item in filter(str.strip, body.split(",")):
            m = _FIELD.fullmatch(item)
            assert m, item
            key, lit = m.groups()
            if lit.startswith('"'):
                value = lit[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            elif lit in ("true", "false"):
                value = lit == "true"
            else:
                value = int(lit)
            row[key] = value
        out.append((decision == "keep", row))
    return out


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_test_blocks_hold(path):
    expectations = parse_expectations(path.read_text())
    assert len(expectations) >= 4
    policy = gp.load(path)
    assert policy.evaluate([row for _, row in expectations]) == [keep for keep, _ in expectations]


# --------------------------------------------------------------------------- serving


def test_serving_settings():
    policy = gp.load(EXAMPLES / "serving.gpol")
    assert policy.config == {"install_free_tensors": True}
    assert policy.stance == ("skip_guard_eval_unsafe", 8)
    assert policy.default_decision == "keep"
    assert policy.fields == ["guard_type", "guard_source.is_unspecialized_nn_module", "is_global", "name"]


@pytest.mark.parametrize("model", ["mlp", "global_fn", "gpt2"])
def test_serving_on_real_entries(model, model_entries):
    entries = model_entries[model]
    policy = gp.load(EXAMPLES / "serving.gpol")

    def reference(e):
        if e.guard_type in ("GLOBAL_STATE", "SHAPE_ENV"):
            return True
        if e.orig_guard.source.is_unspecialized_nn_module():
            return False
        if e.is_global and re.search(SERVING_GLOBAL_PATTERN, e.name):
            return False
        return True

    assert policy(entries) == [reference(e) for e in entries]


CONFIG_SCALE = 2


class Served(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.bias = 1.0

    def forward(self, x):
        return self.fc(x) * CONFIG_SCALE + self.bias


@pytest.fixture
def config_scale():
    global CONFIG_SCALE
    CONFIG_SCALE = 2
    yield
    CONFIG_SCALE = 2


@pytest.mark.usefixtures("config_scale")
def test_serving_end_to_end():
    global CONFIG_SCALE
    policy = gp.load(EXAMPLES / "serving.gpol")
    torch.manual_seed(0)
    mod = Served()
    x = torch.randn(3, 4)
    compiled = compile_with(mod, policy)
    with torch.no_grad():
        first = compiled(x)
        torch.testing.assert_close(first, mod(x))

        # Module attribute and config global change: not seen, no recompile.
        mod.bias = 5.0
        CONFIG_SCALE = 3
        fresh = mod(x)
        assert not torch.allclose(fresh, first)
        with torch.compiler.set_stance("fail_on_recompile"):
            torch.testing.assert_close(compiled(x), first)

    # The global-state guard is kept: grad mode on recompiles.
    with torch.enable_grad(), torch.compiler.set_stance("fail_on_recompile"):
        with pytest.raises(Exception, match=r"(?i)recompil"):
            compiled(x)


@pytest.mark.usefixtures("config_scale")
def test_serving_through_compile_is_monitored_by_verify_every_100_calls():
    """What serving.gpol's doc says it risks: a changed module attribute runs stale between
    verified calls, and the next 100th call catches it (recompiles, logged) -- never later."""
    policy = gp.load(EXAMPLES / "serving.gpol")
    assert policy.verify == (100, "recompile")
    torch.manual_seed(0)
    mod = Served()
    x = torch.randn(3, 4)
    opt = gp.compile(mod, policy, backend="eager")
    st = gp.stats(opt)
    with torch.no_grad():
        for _ in range(50):
            opt(x)
        assert st.stance_active and st.compiles == 1
        mod.bias = 5.0  # a dropped guard's state changes on call 51
        stale = [not torch.equal(opt(x), mod(x)) for _ in range(49)]  # calls 51..99
        assert all(stale) and st.violations == []
        fresh = opt(x)  # call 100: verified, the bias guard fails, recompiled
        torch.testing.assert_close(fresh, mod(x))
    assert st.verified_calls == 1 and len(st.violations) == 1 and st.compiles == 2
    assert "bias" in str(st.violations[0])
    assert "changed module attribute" in policy.doc and "submodule of another class" in policy.doc


class Activated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


def test_serving_catches_a_submodule_of_another_class_on_the_next_verified_call():
    torch.manual_seed(0)
    mod = Activated()
    x = torch.randn(3, 4)
    opt = gp.compile(mod, EXAMPLES / "serving.gpol", backend="eager")
    st = gp.stats(opt)
    with torch.no_grad():
        for _ in range(50):
            opt(x)
        mod.act = torch.nn.GELU()
        assert all(not torch.allclose(opt(x), mod(x)) for _ in range(49))  # calls 51..99: stale
        torch.testing.assert_close(opt(x), mod(x))  # call 100: verified, recompiled
    [violation] = st.violations
    assert [(g.name, g.guard_type) for g in violation.guards] == [("self._modules['act']", "TYPE_MATCH")]


# --------------------------------------------------------------------------- drop_config_globals

TOP_K = 2
offset = 1


def scaled(x):
    return x * TOP_K + offset


@pytest.fixture
def config_globals():
    global TOP_K, offset
    TOP_K, offset = 2, 1
    yield
    TOP_K, offset = 2, 1


@pytest.mark.usefixtures("config_globals")
def test_drop_config_globals_end_to_end(capture):
    global TOP_K, offset
    policy = gp.load(EXAMPLES / "drop_config_globals.gpol")
    x = torch.arange(4.0)

    entries = capture(scaled, x)
    decisions = dict(zip((e.name for e in entries), policy(entries)))
    assert decisions["G['TOP_K']"] is False
    assert decisions["G['offset']"] is True
    assert decisions["x"] is True

    compiled = compile_with(scaled, policy)
    torch.testing.assert_close(compiled(x), x * 2 + 1)
    TOP_K = 7
    assert not torch.equal(scaled(x), x * 2 + 1)
    with torch.compiler.set_stance("fail_on_recompile"):
        torch.testing.assert_close(compiled(x), x * 2 + 1)  # stale: the TOP_K guard is gone
    offset = 4
    with torch.compiler.set_stance("fail_on_recompile"), pytest.raises(Exception, match=r"(?i)recompil"):
        compiled(x)  # the lower-case global is still guarded
