"""The ``names`` example plugin (a function and a filter over guard names) in real
``torch.compile`` runs: shallow_guards.gpol and ``names.drop_deep`` as the guard_filter_fn
itself, and which changes then recompile; and its configuration (``load_plugin(config=...)``),
in a subprocess, since a configured ``names`` is a second ``names`` and a plugin name loads
once per process.
"""

from __future__ import annotations

import pytest
import torch

import guardpolicy as gp
from conftest import MODEL_NAMES, make_mlp
from plugin_harness import (KEEP_ALL, SHALLOW_GUARDS, Spy, compile_and_check, decisions_by_guard, depth, recompiles,
                            run_python)

pytestmark = pytest.mark.usefixtures("example_plugins")


# --------------------------------------------------------------------------- names under torch.compile


def shallow_guards_reference(e) -> bool:
    """shallow_guards.gpol, in Python."""
    if e.guard_type in ("GLOBAL_STATE", "SHAPE_ENV"):
        return True
    if e.guard_type == "TENSOR_MATCH" and not isinstance(e.value, torch.nn.Parameter):
        return True
    if e.orig_guard.source.name == "LOCAL":  # the inputs and what is inside them
        return True
    if e.guard_type in ("CONSTANT_MATCH", "EQUALS_MATCH") and depth(e.name) >= 3:
        return False
    return depth(e.name) <= 3


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_shallow_guards_on_real_entries(model, model_entries):
    entries = model_entries[model]
    policy = gp.load(SHALLOW_GUARDS)
    decisions = policy(entries)
    assert decisions == [shallow_guards_reference(e) for e in entries]
    if model != "global_fn":
        assert False in decisions


def test_shallow_guards_decisions_in_torch_compile(mlp_model):
    spy = Spy(gp.load(SHALLOW_GUARDS))
    compile_and_check(mlp_model.fn, spy, *mlp_model.args)
    got = decisions_by_guard(spy.entries, spy.decisions)
    assert {k for k, v in got.items() if False in v} == {
        ("CONSTANT_MATCH", "self._modules['norm'].eps"),  # rule: constant inside a submodule
        ("CONSTANT_MATCH", "self._modules['norm'].normalized_shape"),
        ("TENSOR_MATCH", "self._modules['fc']._parameters['weight']"),  # drop_deep: depth 4
        ("TENSOR_MATCH", "self._modules['fc']._parameters['bias']"),
        ("TENSOR_MATCH", "self._modules['norm']._parameters['weight']"),
        ("TENSOR_MATCH", "self._modules['norm']._parameters['bias']"),
    }
    assert got[("CONSTANT_MATCH", "self.scale")] == {True}
    assert got[("TENSOR_MATCH", "self._buffers['offset']")] == {True}
    assert got[("TENSOR_MATCH", "x")] == {True}
    # Which rule dropped what: the depth rule (line 18) or the plugin filter.
    policy = spy.policy
    by_rule = {(x.guard_type, x.name): x.rule.policy for x in policy.explain(spy.entries) if not x.keep}
    assert by_rule[("CONSTANT_MATCH", "self._modules['norm'].eps")] == "shallow_guards"
    assert by_rule[("TENSOR_MATCH", "self._modules['fc']._parameters['weight']")] == "names.drop_deep"


@pytest.mark.parametrize("how", ["shallow_guards", "keep_all"])
def test_shallow_guards_eps_change(how):
    """LayerNorm.eps (depth 3) is not guarded under shallow_guards: the change goes unseen
    and the output is stale; with every guard kept it recompiles and is right."""
    m = make_mlp()
    policy = gp.load(SHALLOW_GUARDS if how == "shallow_guards" else KEEP_ALL)
    compiled = compile_and_check(m.fn, policy, *m.args)
    with torch.no_grad():
        first = compiled(*m.args)
        m.fn.norm.eps = 10.0
        fresh = m.fn(*m.args)
    assert not torch.allclose(fresh, first)
    assert recompiles(compiled, *m.args) is (how == "keep_all")
    with torch.no_grad():
        torch.testing.assert_close(compiled(*m.args), first if how == "shallow_guards" else fresh)


def test_shallow_guards_keeps_shallow_attributes():
    """self.scale (depth 1) stays guarded: changing it recompiles."""
    m = make_mlp()
    compiled = compile_and_check(m.fn, gp.load(SHALLOW_GUARDS), *m.args)
    m.fn.scale = 2.0
    assert recompiles(compiled, *m.args)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*m.args), m.fn(*m.args))


@pytest.mark.parametrize("max_depth", [None, 0, 1, 2, 3])
def test_drop_deep_as_guard_filter_fn(max_depth, mlp_model, model_entries):
    """gp.filter("names.drop_deep", max_depth=N) is the guard_filter_fn itself: it keeps
    exactly the guards whose name is at most N steps deep (default 4)."""
    n = 4 if max_depth is None else max_depth
    policy = gp.filter("names.drop_deep") if max_depth is None else gp.filter("names.drop_deep", max_depth=max_depth)
    assert policy.is_unsafe
    for entries in model_entries.values():
        assert policy(entries) == [depth(e.name) <= n for e in entries]
    spy = Spy(policy)
    compile_and_check(mlp_model.fn, spy, *mlp_model.args)
    assert spy.decisions == [depth(e.name) <= n for e in spy.entries]
    assert all(type(d) is bool for d in spy.decisions)
    # The same filter written three ways in the language decides the same.
    variants = [
        f"use names.drop_deep(max_depth = {n})",
        f"drop when names.drop_deep({n})",
        f"drop when names.depth(name) > {n}",
    ]
    for rule in variants:
        same = gp.load(f"guardpolicy 1\n\nunsafe policy v {{\n  {rule}\n}}\n")
        assert same(spy.entries) == spy.decisions, rule


@pytest.mark.parametrize(("max_depth", "attribute", "expect_recompile"),
                         [(2, "eps", False), (3, "eps", True), (2, "scale", True), (0, "scale", False)])
def test_drop_deep_recompiles(max_depth, attribute, expect_recompile):
    """norm.eps is guarded at depth 3, scale at depth 1: a change recompiles exactly when
    drop_deep(max_depth) kept its guard."""
    m = make_mlp()
    compiled = compile_and_check(m.fn, gp.filter("names.drop_deep", max_depth=max_depth), *m.args)
    if attribute == "eps":
        m.fn.norm.eps = 10.0
    else:
        m.fn.scale = 2.0
    assert recompiles(compiled, *m.args) is expect_recompile


# --------------------------------------------------------------------------- names configuration

NAMES_CONFIG = """
    import json, sys, warnings
    sys.path.insert(0, "tests/python")
    import torch
    import guardpolicy as gp
    from conftest import make_mlp
    path = gp.example_plugin_path("names")
    out = {}
    try:
        gp.load_plugin(path, config="bogus")
    except gp.PluginError as e:
        out["bogus"] = str(e)
    out["after_bogus"] = [p.name for p in gp.plugins()]
    out["strict"] = gp.load_plugin(path, config="strict").name
    policy = gp.load("guardpolicy 1\\nunsafe policy deep {\\n  drop when names.depth(name) > 3\\n}\\n")
    out["rows"] = policy.evaluate([{"name": "a.b.c.d.e"}, {"name": "a.b"}])
    try:
        policy.evaluate([{"name": ""}])
    except gp.PluginError as e:
        out["empty_row"] = str(e)
    m = make_mlp()
    calls = []

    def spy(entries):
        decisions = policy(entries)
        calls.append([[e.name, keep] for e, keep in zip(entries, decisions)])
        return decisions

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = torch.compile(m.fn, backend="eager", options={"guard_filter_fn": spy})(*m.args)
            out["result_ok"] = bool(torch.allclose(got, m.fn(*m.args)))
    out["calls"] = calls
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, gp.PolicyRuntimeWarning)]
    print(json.dumps(out))
"""


def test_names_configuration():
    """load_plugin(config=...): an unknown configuration fails init and loads nothing (the
    name stays free); "strict" makes depth("") fail, which on_error keep turns into kept
    guards for exactly the unnamed entries (global state, shape env) plus a warning."""
    out = run_python(NAMES_CONFIG)
    path = gp.example_plugin_path("names")
    assert out["bogus"] == (f'{path}: plugin `names` failed to initialize: unknown configuration `bogus` '
                            '(expected "" or "strict")')
    assert out["after_bogus"] == ["builtin"]
    assert out["strict"] == "names"
    assert out["rows"] == [False, True]
    reason = f"{path}: plugin `names`: function `names.depth`: depth() of an empty name (strict mode)"
    assert out["empty_row"] == reason
    assert out["result_ok"] is True
    (call,) = out["calls"]
    unnamed = [name for name, _ in call if name == ""]
    assert len(unnamed) >= 2  # GLOBAL_STATE, SHAPE_ENV and other global-state guards
    assert [keep for _, keep in call] == [name == "" or depth(name) <= 3 for name, _ in call]
    assert False in [keep for _, keep in call]
    assert out["warnings"] == [f"guardpolicy: policy `deep` could not read {len(unnamed)} of {len(call)} guard entries "
                               f"({reason}); on_error keep decided them"]


def test_default_configuration_allows_empty_names():
    """The fixture's names plugin has the default configuration: depth("") is 0."""
    policy = gp.load("guardpolicy 1\nunsafe policy deep {\n  drop when names.depth(name) < 1\n}\n")
    assert policy.evaluate([{"name": ""}, {"name": "a.b"}]) == [False, True]
