"""Plugins from Python and the command line: the example plugins (``modinfo``: fields read
from the guarded Python value; ``names``: a function and a filter over guard names) on real
``torch.compile`` runs, the example policies that use them, every broken plugin as a
``PluginError`` with its exact reason, and plugin callbacks failing inside guard_filter_fn.

Loading is process-global and a plugin name loads once per process: the example plugins
come from the session fixture ``example_plugins`` (conftest.py); the broken test plugins
(``<build>/tests/plugins/*.so``, built by ``make build``) that do load are all named
``good``, and the ``names`` plugin with another configuration is a second ``names``, so
those run in a subprocess each and report back as JSON.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch._dynamo

import guardpolicy as gp
from conftest import EXAMPLE_PLUGIN_ORDER, MODEL_NAMES, capture_entries, compile_with, make_mlp

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "policies" / "examples"
MODULE_KINDS = EXAMPLES / "module_kinds.gpol"
SHALLOW_GUARDS = EXAMPLES / "shallow_guards.gpol"
KEEP_ALL = EXAMPLES / "keep_all.gpol"
CLI = Path(sys.executable).parent / "guardpolicy"
# Where `make build` puts the broken plugins (tests/plugins/CMakeLists.txt); another build dir
# can be named with $GUARDPOLICY_TEST_PLUGIN_DIR.
BAD_PLUGIN_DIR = Path(os.environ.get("GUARDPOLICY_TEST_PLUGIN_DIR", ROOT / "build" / "tests" / "plugins"))
RECOMPILE = r"(?i)recompil"

pytestmark = pytest.mark.usefixtures("example_plugins")


def depth(name: str) -> int:
    """names.depth, in Python: the `.` and `[` steps of a guard name."""
    return name.count(".") + name.count("[")


def bad_plugin(kind: str) -> str:
    path = BAD_PLUGIN_DIR / f"{kind}.so"
    assert path.is_file(), f"{path} is missing: the test plugins are built by `make build` (tests/plugins/CMakeLists.txt)"
    return str(path)


def run_python(script: str, *args: str) -> dict:
    """Runs ``script`` in a fresh interpreter (``sys.argv[1:]`` = args); the script prints
    one JSON object as its last stdout line, which is returned."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cli(*args, **kwargs) -> subprocess.CompletedProcess:
    assert CLI.is_file(), CLI
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120, **kwargs)


def fail_on_recompile():
    return torch.compiler.set_stance("fail_on_recompile")


def recompiles(compiled, *args) -> bool:
    """True when calling ``compiled`` needs a new compilation (nothing is compiled)."""
    try:
        with fail_on_recompile(), torch.no_grad():
            compiled(*args)
    except Exception as e:  # torch raises RuntimeError naming the recompilation
        assert re.search(RECOMPILE, str(e)), e
        return True
    return False


def decisions_by_guard(entries, decisions) -> dict[tuple[str, str], set[bool]]:
    """{(guard_type, name): the decisions its entries got} (a name can carry several)."""
    out: dict[tuple[str, str], set[bool]] = {}
    for e, keep in zip(entries, decisions):
        out.setdefault((e.guard_type, e.name), set()).add(keep)
    return out


class Spy:
    """guard_filter_fn that records the entries and the decisions ``policy`` gave them."""

    def __init__(self, policy):
        self.policy = policy
        self.calls: list[tuple[list, list[bool]]] = []

    def __call__(self, entries):
        decisions = self.policy(entries)
        self.calls.append((list(entries), decisions))
        return decisions

    @property
    def entries(self):
        return [e for entries, _ in self.calls for e in entries]

    @property
    def decisions(self):
        return [d for _, decisions in self.calls for d in decisions]


# --------------------------------------------------------------------------- models


class Block(torch.nn.Module):
    """Linear(8, 8) + Dropout + LayerNorm(8): parameters of 64 and 8 elements."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.25)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.drop(self.fc(x)))


class LoudDropout(torch.nn.Dropout):
    """A Dropout whose forward differs: only the guard on the module's type tells them apart."""

    def forward(self, x):
        return super().forward(x) * 2


class TripleLinear(torch.nn.Linear):
    def forward(self, x):
        return super().forward(x) * 3


def make_block() -> Block:
    torch.manual_seed(0)
    return Block().eval()


BLOCK_INPUT = torch.randn(2, 8, generator=torch.Generator().manual_seed(2))


def compile_and_check(model, guard_filter_fn, *args):
    """Compiles with guard_filter_fn, checks the first call equals eager, returns it."""
    compiled = compile_with(model, guard_filter_fn)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), model(*args))
    return compiled


# --------------------------------------------------------------------------- registry


def test_example_plugins_declarations(example_plugins):
    assert gp.EXAMPLE_PLUGINS == ("modinfo", "names")
    for name in gp.EXAMPLE_PLUGINS:
        path = Path(gp.example_plugin_path(name))
        assert path.is_file() and path.name == f"libgp_{name}.so"
    with pytest.raises(KeyError, match="no example plugin 'nosuch'; known: modinfo, names"):
        gp.example_plugin_path("nosuch")

    plugins = gp.plugins()
    assert [p.name for p in plugins] == ["builtin", *EXAMPLE_PLUGIN_ORDER]
    by_name = {p.name: p for p in plugins}
    assert by_name["names"] == example_plugins["names"] and by_name["modinfo"] == example_plugins["modinfo"]

    builtin = by_name["builtin"]
    assert (builtin.path, builtin.api_version, builtin.fields, builtin.functions) == ("builtin", "1.0", (), ())
    assert sorted(f["name"] for f in builtin.filters) == sorted(f"builtin.{n}" for n in gp.STD_POLICIES)

    modinfo = by_name["modinfo"]
    assert (modinfo.version, modinfo.api_version, modinfo.path) == ("1.0.0", "1.0", gp.example_plugin_path("modinfo"))
    assert modinfo.description == "fields read from the guarded Python value: class name, tensor dtype and size"
    assert [(f["name"], f["type"]) for f in modinfo.fields] == [
        ("modinfo.class_name", "string"),
        ("modinfo.dtype", "string"),
        ("modinfo.numel", "int"),
    ]
    assert all(f["doc"] for f in modinfo.fields)
    assert modinfo.functions == () and modinfo.filters == ()

    names = by_name["names"]
    assert (names.version, names.api_version, names.path) == ("1.0.0", "1.0", gp.example_plugin_path("names"))
    assert names.description == "guard-name depth: a function and a filter"
    assert names.fields == ()
    assert [(f["name"], f["args"], f["result"]) for f in names.functions] == [("names.depth", ["string"], "int")]
    assert [(f["name"], f["params"]) for f in names.filters] == [("names.drop_deep", [("max_depth", "int", 4, True)])]
    assert names.filters[0]["doc"] == "drop guards on names nested deeper than max_depth"


def test_plugin_filter_in_registry():
    (info,) = [f for f in gp.filters() if f.kind == "plugin"]
    assert info == gp.FilterInfo("names.drop_deep", "plugin", "drop guards on names nested deeper than max_depth",
                                 (gp.FilterParam("max_depth", "int", 4, True),), gp.example_plugin_path("names"))
    bound = gp.filter("names.drop_deep", max_depth=2)
    assert (bound.params, bound.doc) == ({"max_depth": 2}, "drop guards on names nested deeper than max_depth")
    assert gp.filter("names.drop_deep").params == {"max_depth": 4}
    with pytest.raises(gp.PolicyError) as unknown:
        gp.filter("names.drop_dep")
    (d,) = unknown.value.diagnostics
    assert (d.code, d.message, d.help) == ("GP4001", "no filter named `names.drop_dep`", "did you mean `names.drop_deep`?")
    with pytest.raises(gp.PolicyError):
        gp.filter("names.drop_deep", max_depth="deep")


def test_second_load_of_a_loaded_plugin_is_refused():
    path = gp.example_plugin_path("names")
    before = gp.plugins()
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(path)
    assert str(info.value) == f"{path}: plugin `names`: a plugin with this name is already loaded"
    assert gp.plugins() == before


# --------------------------------------------------------------------------- checker


def lint_one(source: str) -> gp.Diagnostic:
    diags = gp.lint(source)
    assert len(diags) == 1, [d.rendered for d in diags]
    return diags[0]


def test_misspelt_plugin_field_is_gp2001_with_did_you_mean():
    d = lint_one('guardpolicy 1\nunsafe policy p { drop when modinfo.clas_name == "Linear" }\n')
    assert (d.code, d.severity, d.message) == ("GP2001", "error", "unknown field `modinfo.clas_name`")
    assert d.help == "did you mean `modinfo.class_name`?"
    assert (d.line, d.column) == (2, 29)


def test_misspelt_plugin_function_is_gp2016_with_did_you_mean():
    d = lint_one("guardpolicy 1\nunsafe policy p { drop when names.dept(name) > 3 }\n")
    assert (d.code, d.severity, d.message) == ("GP2016", "error", "unknown function `names.dept`")
    assert d.help == "did you mean `names.depth`?"


def test_misspelt_plugin_filter_is_gp2005_with_did_you_mean():
    d = lint_one("guardpolicy 1\nunsafe policy p { use names.drop_dep(max_depth = 3) }\n")
    assert (d.code, d.message) == ("GP2005", "unknown policy `names.drop_dep`")
    assert d.help == "did you mean `names.drop_deep`?"


def test_plugin_calls_are_type_checked():
    d = lint_one("guardpolicy 1\nunsafe policy p { drop when names.depth(1) > 3 }\n")
    assert d.code == "GP2017"
    d = lint_one('guardpolicy 1\nunsafe policy p { drop when modinfo.numel == "16" }\n')
    assert d.severity == "error"


# --------------------------------------------------------------------------- modinfo fields


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_modinfo_fields_read_the_python_value(model, model_entries):
    """Each field, on every entry of the real models, equals what Python says of the value
    (probed with one `drop when FIELD == V` policy per value that occurs)."""
    entries = model_entries[model]

    def is_tensor(e):
        return e.has_value and isinstance(e.value, torch.Tensor)

    reference = {
        "modinfo.class_name": [type(e.value).__name__ if e.has_value else "" for e in entries],
        "modinfo.dtype": [str(e.value.dtype) if is_tensor(e) else "" for e in entries],
        "modinfo.numel": [e.value.numel() if is_tensor(e) else -1 for e in entries],
    }
    assert {"", "Tensor"} <= set(reference["modinfo.class_name"])  # "": entries without a value
    assert "torch.float32" in reference["modinfo.dtype"]
    if model == "global_fn":
        assert "int" in reference["modinfo.class_name"]  # G['GLOBAL_INT']
    else:
        assert {"Parameter", "LayerNorm", "OrderedDict", "builtin_function_or_method"} <= set(
            reference["modinfo.class_name"])
    if model == "gpt2":
        assert "torch.int64" in reference["modinfo.dtype"]  # input_ids
    for field, expected in reference.items():
        for v in sorted(set(expected), key=str):
            literal = str(v) if isinstance(v, int) else json.dumps(v)
            probe = gp.load(f"guardpolicy 1\nunsafe policy probe {{\n  drop when {field} == {literal}\n}}\n")
            assert probe(entries) == [x != v for x in expected], (field, v)


# --------------------------------------------------------------------------- modinfo under torch.compile

DROP_LINEAR = """guardpolicy 1

unsafe policy drop_linear {
  drop when modinfo.class_name == "Linear"
}
"""

DROP_NUMEL_64 = """guardpolicy 1

unsafe policy drop_numel_64 {
  drop when guard_type == TENSOR_MATCH and modinfo.numel == 64
}
"""

BLOCK_DROPOUT_GUARDS = {
    ("NOT_PRESENT_IN_GENERIC_DICT", "self._modules['drop']"),
    ("TYPE_MATCH", "self._modules['drop']"),
}
BLOCK_SMALL_PARAMETERS = {
    ("TENSOR_MATCH", "self._modules['fc']._parameters['bias']"),
    ("TENSOR_MATCH", "self._modules['norm']._parameters['bias']"),
    ("TENSOR_MATCH", "self._modules['norm']._parameters['weight']"),
}
BLOCK_FC_WEIGHT = ("TENSOR_MATCH", "self._modules['fc']._parameters['weight']")


@pytest.mark.parametrize("max_numel", [None, 64])
def test_module_kinds_decisions_in_torch_compile(max_numel):
    """module_kinds.gpol inside torch.compile on Block: exactly the guards on the Dropout
    module object and on float32 parameters of at most max_numel elements are dropped."""
    params = {} if max_numel is None else {"max_numel": max_numel}
    policy = gp.load(MODULE_KINDS, **params)
    assert policy.params == {"max_numel": max_numel or 16}
    model = make_block()
    spy = Spy(policy)
    compile_and_check(model, spy, BLOCK_INPUT)
    assert len(spy.calls) == 1
    got = decisions_by_guard(spy.entries, spy.decisions)
    dropped = {k for k, v in got.items() if v == {False}}
    expected = BLOCK_DROPOUT_GUARDS | BLOCK_SMALL_PARAMETERS | ({BLOCK_FC_WEIGHT} if max_numel == 64 else set())
    assert dropped == expected
    assert all(v == {True} for k, v in got.items() if k not in expected)  # no name split between keep and drop
    # The plain inputs and the global state stay guarded.
    assert got[("TENSOR_MATCH", "x")] == {True}
    assert got[("GLOBAL_STATE", "")] == {True} and got[("SHAPE_ENV", "")] == {True}
    # And the entries decide the same through explain(): the rules that dropped them.
    rules = {(x.guard_type, x.name): x.rule.line for x in policy.explain(spy.entries) if not x.keep}
    assert {k for k, line in rules.items() if line == 19} == BLOCK_DROPOUT_GUARDS
    assert {k for k, line in rules.items() if line == 20} == expected - BLOCK_DROPOUT_GUARDS


def test_module_kinds_swapped_dropout_is_not_seen():
    """The dropped TYPE_MATCH on the Dropout: a Dropout subclass swapped in runs the stale
    code, without recompiling; with every guard kept (keep_all.gpol) it recompiles."""
    model = make_block()
    compiled = compile_and_check(model, gp.load(MODULE_KINDS), BLOCK_INPUT)
    with torch.no_grad():
        first = compiled(BLOCK_INPUT)
        model.drop = LoudDropout(0.25).eval()
        fresh = model(BLOCK_INPUT)
        assert not torch.allclose(fresh, first)
        with fail_on_recompile():
            stale = compiled(BLOCK_INPUT)
    torch.testing.assert_close(stale, first)

    torch._dynamo.reset()
    control_model = make_block()
    control = compile_and_check(control_model, gp.load(KEEP_ALL), BLOCK_INPUT)
    control_model.drop = LoudDropout(0.25).eval()
    assert recompiles(control, BLOCK_INPUT)
    with torch.no_grad():
        torch.testing.assert_close(control(BLOCK_INPUT), control_model(BLOCK_INPUT))


@pytest.fixture
def parameter_guards_evaluated():
    """Kept parameter guards evaluated on every call. torch 2.11 skips a parameter's
    TENSOR_MATCH while its module's ``_parameters`` dict is unchanged
    (``torch._dynamo.config.skip_tensor_guards_with_matching_dict_tags``, on by default), so an
    in-place ``requires_grad_`` is not seen there even with every guard kept
    (``test_torch_2_11_skips_kept_parameter_guards_under_matching_dict_tags``); 2.12+ evaluates
    them with the same setting on. The tests below are about which guards a policy keeps, so
    they run with the skip off, where every release evaluates what was kept."""
    with torch._dynamo.config.patch(skip_tensor_guards_with_matching_dict_tags=False):
        yield


def _release() -> tuple[int, int]:
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


def test_torch_2_11_skips_kept_parameter_guards_under_matching_dict_tags():
    """What ``parameter_guards_evaluated`` works around, as torch does it by default: every
    guard kept, ``requires_grad_`` flipped in place on a parameter; torch 2.11 serves the cached
    code (docs/schema.md, "Between releases"), 2.12+ recompiles (the change is in torch's C++
    guard manager, with nothing to read from Python: hence the release)."""
    model = make_block()
    compiled = compile_and_check(model, gp.load(KEEP_ALL), BLOCK_INPUT)
    model.fc.bias.requires_grad_(False)
    assert recompiles(compiled, BLOCK_INPUT) is (_release() >= (2, 12))


@pytest.mark.usefixtures("parameter_guards_evaluated")
@pytest.mark.parametrize(
    ("max_numel", "parameter", "expect_recompile"),
    [
        (16, "fc.bias", False),  # 8 elements: its TENSOR_MATCH was dropped
        (16, "fc.weight", True),  # 64 elements: kept
        (64, "fc.weight", False),  # now dropped too
        (16, "norm.weight", False),
    ],
)
def test_module_kinds_parameter_guards_follow_numel(max_numel, parameter, expect_recompile):
    """requires_grad is part of TENSOR_MATCH: flipping it recompiles exactly when the
    parameter's guard was kept."""
    model = make_block()
    compiled = compile_and_check(model, gp.load(MODULE_KINDS, max_numel=max_numel), BLOCK_INPUT)
    model.get_parameter(parameter).requires_grad_(False)
    assert recompiles(compiled, BLOCK_INPUT) is expect_recompile


@pytest.mark.usefixtures("parameter_guards_evaluated")
def test_module_kinds_control_recompiles_on_small_parameter():
    model = make_block()
    compiled = compile_and_check(model, gp.load(KEEP_ALL), BLOCK_INPUT)
    model.fc.bias.requires_grad_(False)
    assert recompiles(compiled, BLOCK_INPUT)


def test_drop_by_class_name_drops_the_linear_type_match():
    """`drop when modinfo.class_name == "Linear"`: the guards on the Linear submodule
    object go (and nothing else); a Linear subclass swapped in is then not seen."""
    policy = gp.load(DROP_LINEAR)
    model = make_block()
    spy = Spy(policy)
    compiled = compile_and_check(model, spy, BLOCK_INPUT)
    got = decisions_by_guard(spy.entries, spy.decisions)
    assert {k for k, v in got.items() if False in v} == {
        ("TYPE_MATCH", "self._modules['fc']"),
        ("NOT_PRESENT_IN_GENERIC_DICT", "self._modules['fc']"),
    }
    assert got[("TYPE_MATCH", "self._modules['fc']")] == {False}
    assert got[("TYPE_MATCH", "self._modules['drop']")] == {True}

    with torch.no_grad():
        first = compiled(BLOCK_INPUT)
        swapped = TripleLinear(8, 8)
        swapped.load_state_dict(model.fc.state_dict())
        model.fc = swapped
        fresh = model(BLOCK_INPUT)
        assert not torch.allclose(fresh, first)
        with fail_on_recompile():
            torch.testing.assert_close(compiled(BLOCK_INPUT), first)  # stale: the type guard is gone


def test_keep_linear_type_match_recompiles_on_swap():
    model = make_block()
    compiled = compile_and_check(model, gp.load(KEEP_ALL), BLOCK_INPUT)
    swapped = TripleLinear(8, 8)
    swapped.load_state_dict(model.fc.state_dict())
    model.fc = swapped
    assert recompiles(compiled, BLOCK_INPUT)


def test_drop_by_numel(mlp_model):
    """`modinfo.numel == 64` picks the 8x8 Linear weight of conftest's MLP, nothing else."""
    spy = Spy(gp.load(DROP_NUMEL_64))
    compile_and_check(mlp_model.fn, spy, *mlp_model.args)
    got = decisions_by_guard(spy.entries, spy.decisions)
    assert {k for k, v in got.items() if False in v} == {("TENSOR_MATCH", "self._modules['fc']._parameters['weight']")}
    assert spy.decisions == [not (e.guard_type == "TENSOR_MATCH" and e.value.numel() == 64) for e in spy.entries]


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


# --------------------------------------------------------------------------- broken plugins

# The exact PluginError text after "<path>: " (tests/cpp/plugin_test.cpp checks a prefix of
# each; here the whole reason).
ABI_HINT = "(ABI 1.0: the major must be equal and the minor not newer); rebuild the plugin against this plugin_api.h"
BAD_PLUGINS = {
    "no_entry": "not a guardpolicy plugin: no `gp_plugin_get_api` symbol",
    "null_table": "`gp_plugin_get_api` returned no table",
    "major": f"plugin ABI 2.0 is not supported by this guardpolicy {ABI_HINT}",
    "minor": f"plugin ABI 1.99 is not supported by this guardpolicy {ABI_HINT}",
    "small_table": "the plugin table is 16 bytes, smaller than an ABI 1.0 table (108 bytes)",
    "name": "plugin name `Bad-Name` is not [a-z_][a-z0-9_]* (at most 64 bytes, not a keyword)",
    "type": "plugin `good`: field `good.flag`: unknown type `float` (bool, int, string, an enum such as GuardType, "
            "or set:<Enum>)",
    "duplicate": "plugin `good` declares `twice` twice",
    "clash": "plugin `guard_source`: the name clashes with the schema field `guard_source`",
    "reads": "plugin `good`: field `good.flag`: reads `nosuch.field`, which is not a core schema field",
    "init": "plugin `good` failed to initialize: the bad plugin failed on purpose",
    "keyword": "plugin name `when` is not [a-z_][a-z0-9_]* (at most 64 bytes, not a keyword)",
    "text": "plugin `good`: field doc is not UTF-8 (byte 2)",
    "args": "plugin `good`: function `one` has 17 arguments, over the limit of 16",
}


@pytest.mark.parametrize("kind", sorted(BAD_PLUGINS))
def test_bad_plugin_is_a_plugin_error_and_the_process_goes_on(kind):
    path = bad_plugin(kind)
    before = gp.plugins()
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(path)
    assert str(info.value) == f"{path}: {BAD_PLUGINS[kind]}"
    # Nothing was registered, and the loaded plugins still work.
    assert gp.plugins() == before
    policy = gp.load("guardpolicy 1\nunsafe policy still_works {\n"
                     "  drop when names.depth(name) > 1 and modinfo.numel == 0\n}\n")
    assert policy.evaluate([{"name": "a.b.c", "modinfo.numel": 0}, {"name": "a"}]) == [False, True]


def test_not_a_shared_library(tmp_path):
    text = tmp_path / "not_a_plugin.so"
    text.write_text("#" * 200 + "\nthis is text, not an ELF shared library\n")
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(text)
    assert str(info.value) == f"{text}: cannot load the plugin: {text}: invalid ELF header"
    missing = tmp_path / "libmissing.so"
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(missing)
    assert str(info.value) == (f"{missing}: cannot load the plugin: {missing}: cannot open shared object file: "
                               "No such file or directory")


LOAD_ALL_BAD_THEN_GOOD = """
    import json, sys
    import guardpolicy as gp
    errors = {}
    for path in sys.argv[2:]:
        try:
            gp.load_plugin(path)
            errors[path] = None
        except gp.PluginError as e:
            errors[path] = str(e)
    names_before = [p.name for p in gp.plugins()]
    good = gp.load_plugin(sys.argv[1])
    policy = gp.filter("good.drop_all")
    print(json.dumps({"errors": errors, "before": names_before, "after": [p.name for p in gp.plugins()],
                      "good": [good.name, [f["name"] for f in good.fields], [f["name"] for f in good.functions],
                               [f["name"] for f in good.filters]],
                      "drop_all": policy.evaluate([{"name": "x"}, {}]),
                      "flag": gp.load("guardpolicy 1\\nunsafe policy f {\\n  drop when good.flag\\n}\\n").evaluate(
                          [{"good.flag": True}, {"good.flag": False}])}))
"""


def test_good_plugin_loads_after_every_bad_one():
    """In one fresh process: every broken plugin fails, then the valid `good` loads and its
    filter and field work."""
    bad = [bad_plugin(kind) for kind in sorted(BAD_PLUGINS)]
    out = run_python(LOAD_ALL_BAD_THEN_GOOD, bad_plugin("good"), *bad)
    assert out["errors"] == {path: f"{path}: {BAD_PLUGINS[Path(path).stem]}" for path in bad}
    assert out["before"] == ["builtin"]
    assert out["after"] == ["builtin", "good"]
    assert out["good"] == ["good", ["good.flag"], ["good.one"], ["good.drop_all"]]
    assert out["drop_all"] == [False, False]
    assert out["flag"] == [False, True]


# --------------------------------------------------------------------------- failing callbacks

FAILING_CALLBACK = """
    import json, sys, warnings
    import torch
    import guardpolicy as gp
    kind, path = sys.argv[1], sys.argv[2]
    gp.load_plugin(path)
    rule = {"extract": "drop when good.flag", "call": "drop when good.one(1) == 1", "filter": "use good.drop_all"}[kind]

    def f(x):
        return x * 2 + 1

    x = torch.arange(3.0)
    out = {}
    for on_error in ("keep", "drop", "raise"):
        policy = gp.load(f"guardpolicy 1\\n\\nunsafe policy p {{\\n  {rule}\\n  on_error {on_error}\\n}}\\n")
        calls = []

        def spy(entries):
            try:
                decisions = policy(entries)
            except Exception as e:
                calls.append({"n": len(entries), "raised": type(e).__name__, "message": str(e)})
                raise
            calls.append({"n": len(entries), "decisions": decisions})
            return decisions

        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = torch.compile(f, backend="eager", options={"guard_filter_fn": spy})(x)
                outcome = {"result_ok": bool(torch.equal(result, f(x)))}
            except Exception as e:
                chain, c = [], e
                while c is not None:
                    chain.append(type(c).__name__)
                    c = c.__cause__ or c.__context__
                outcome = {"chain": chain, "is_plugin_error": any(
                    isinstance(c, gp.PluginError) for c in [e, e.__cause__, e.__context__])}
        outcome["calls"] = calls
        outcome["warnings"] = [[w.category.__name__, str(w.message)] for w in caught
                               if issubclass(w.category, gp.PolicyRuntimeWarning)]
        out[on_error] = outcome
    # gp.compile also explains each compiled frame: still one warning per failing call.
    torch._dynamo.reset()
    policy = gp.load(f"guardpolicy 1\\n\\nunsafe policy p {{\\n  {rule}\\n}}\\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp.compile(f, policy, backend="eager")(x)
    out["gp_compile_warnings"] = sum(issubclass(w.category, gp.PolicyRuntimeWarning) for w in caught)
    # The process goes on: a policy without the plugin compiles and runs.
    torch._dynamo.reset()
    keep = gp.load_std("skip_guard_on_globals")
    out["after"] = bool(torch.equal(torch.compile(f, backend="eager", options={"guard_filter_fn": keep})(x), f(x)))
    print(json.dumps(out))
"""

CALLBACK_WHAT = {
    "extract": "field `good.flag`",
    "call": "function `good.one`",
    "filter": "filter `good.drop_all`",
}


@pytest.mark.parametrize("kind", ["extract", "call", "filter"])
def test_failing_callback_inside_guard_filter_fn(kind):
    """A plugin callback that fails inside torch.compile: on_error keep (the default) keeps
    every guard and warns PolicyRuntimeWarning naming the plugin file and its message;
    on_error drop drops them and warns; on_error raise raises PluginError out of the
    filter (torch wraps it)."""
    path = bad_plugin(kind)
    out = run_python(FAILING_CALLBACK, kind, path)
    reason = f"{path}: plugin `good`: {CALLBACK_WHAT[kind]}: the bad plugin failed on purpose"

    for on_error, keep in (("keep", True), ("drop", False)):
        got = out[on_error]
        assert got["result_ok"] is True
        (call,) = got["calls"]
        n = call["n"]
        assert n > 0 and call["decisions"] == [keep] * n
        assert got["warnings"] == [[
            "PolicyRuntimeWarning",
            f"guardpolicy: policy `p` could not read {n} of {n} guard entries ({reason}); on_error {on_error} "
            "decided them",
        ]]

    raised = out["raise"]
    (call,) = raised["calls"]
    assert call["raised"] == "PluginError" and call["message"] == reason
    assert raised["is_plugin_error"] is True, raised["chain"]
    assert raised["warnings"] == []
    assert out["gp_compile_warnings"] == 1
    assert out["after"] is True


def test_default_on_error_is_keep():
    assert gp.load("guardpolicy 1\nunsafe policy p {\n  drop when names.depth(name) > 3\n}\n").on_error == "keep"


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


# --------------------------------------------------------------------------- example policies


@pytest.mark.parametrize(("path", "plugin"), [(MODULE_KINDS, "modinfo"), (SHALLOW_GUARDS, "names")],
                         ids=["module_kinds", "shallow_guards"])
def test_example_header_names_its_plugin_and_lint_command(path, plugin):
    """The header comment's lint command, run as written (with .venv/bin first on PATH),
    lints the file clean; without the plugin the same file does not check."""
    text = path.read_text()
    command = next(line[1:].strip() for line in text.splitlines() if line.startswith("#   guardpolicy lint --plugin"))
    assert command == (f"guardpolicy lint --plugin $(python -c 'import guardpolicy as gp; "
                       f"print(gp.example_plugin_path(\"{plugin}\"))') policies/examples/{path.name}")
    env = {**os.environ, "PATH": f"{CLI.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    test_cmd = command.replace("guardpolicy lint", "guardpolicy test", 1)
    assert f"#   {test_cmd}" in text
    proc = subprocess.run(["bash", "-c", test_cmd], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\d+ passed, 0 failed$", proc.stdout, re.M), proc.stdout

    bare = run_cli("lint", path)
    assert bare.returncode == 1
    codes = set(re.findall(r"error\[(GP\d{4})\]", bare.stderr))
    assert codes == ({"GP2001", "GP2015"} if plugin == "modinfo" else {"GP2016", "GP2005"}), bare.stderr
    assert "--plugin" in bare.stderr or plugin == "modinfo"


def test_cli_lint_with_plugin_reports_plugin_diagnostics(tmp_path):
    bad = tmp_path / "bad.gpol"
    bad.write_text('guardpolicy 1\nunsafe policy bad {\n  drop when modinfo.clas_name == "Linear"\n}\n')
    proc = run_cli("lint", bad, "--plugin", gp.example_plugin_path("modinfo"))
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert f"{bad}:3:13: error[GP2001]: unknown field `modinfo.clas_name`" in lines
    assert "  = help: did you mean `modinfo.class_name`?" in lines


def test_cli_bad_plugin_is_a_usage_error(tmp_path):
    path = bad_plugin("major")
    proc = run_cli("lint", MODULE_KINDS, "--plugin", path)
    assert proc.returncode == 2
    assert f"{path}: plugin ABI 2.0 is not supported by this guardpolicy" in proc.stderr


def test_cli_check_with_plugin_matches_live_decisions(tmp_path, mlp_model):
    """`guardpolicy check --plugin libgp_names.so shallow_guards.gpol --guards snap.json`
    decides every recorded guard like the live policy did on the GuardFilterEntry objects."""
    from guardpolicy.tools.capture import capture

    snapshot = capture(mlp_model.fn, *mlp_model.args)
    snap = tmp_path / "mlp.json"
    snapshot.to_json(snap)
    live = gp.load(SHALLOW_GUARDS)(capture_entries(mlp_model.fn, *mlp_model.args))
    assert gp.load(SHALLOW_GUARDS).evaluate(snapshot.rows()) == live

    proc = run_cli("check", SHALLOW_GUARDS, "--guards", snap, "--explain", "--plugin", gp.example_plugin_path("names"))
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("  ") and not ln.lstrip().startswith("|")]
    assert [ln[0] for ln in lines] == ["keep" if k else "drop" for k in live]
    assert any(" ".join(ln).endswith(f"names.drop_deep at {SHALLOW_GUARDS}:20") for ln in lines if ln[0] == "drop")
    kept = sum(live)
    assert f"{len(live)} guards in 1 frames: {kept} kept, {len(live) - kept} dropped" in proc.stdout

    # Without the plugin the policy does not check; a snapshot has no Python values, so
    # modinfo's fields cannot be read from it (a clear error, exit 2).
    assert run_cli("check", SHALLOW_GUARDS, "--guards", snap).returncode == 1
    no_value = run_cli("check", MODULE_KINDS, "--guards", snap, "--plugin", gp.example_plugin_path("modinfo"))
    assert no_value.returncode == 2
    assert "plugin `modinfo`: field `modinfo." in no_value.stderr
    assert "needs the Python GuardFilterEntry" in no_value.stderr


def test_cli_plugin_option_before_several_files():
    """Each --plugin takes one path (CLI11 once took every later word as another plugin)."""
    plugins = [arg for name in gp.EXAMPLE_PLUGINS for arg in ("--plugin", gp.example_plugin_path(name))]
    proc = run_cli("lint", *plugins, MODULE_KINDS, SHALLOW_GUARDS)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_cli_documented_usage_one_plugin_one_file():
    """`lint --plugin PATH FILE` (docs/cli.md, the example headers) works as written."""
    for path, plugin in ((MODULE_KINDS, "modinfo"), (SHALLOW_GUARDS, "names")):
        proc = run_cli("lint", "--plugin", gp.example_plugin_path(plugin), path)
        assert (proc.returncode, proc.stderr) == (0, ""), path
    # Several files, before the options too.
    both = run_cli("lint", MODULE_KINDS, SHALLOW_GUARDS, "--plugin", gp.example_plugin_path("modinfo"),
                   "--plugin", gp.example_plugin_path("names"))
    assert (both.returncode, both.stderr) == (0, "")


def test_filter_calls_may_leave_out_defaulted_parameters(example_plugins):
    """`names.drop_deep()` is `names.drop_deep(4)` (its declared default); too many
    arguments is GP2017 naming the accepted count."""
    rows = [{"name": "a.b.c.d"}, {"name": "a.b.c.d.e"}, {"name": "a.b.c.d.e.f"}]
    short = gp.load("guardpolicy 1\nunsafe policy p { drop when names.drop_deep() }\n")
    full = gp.load("guardpolicy 1\nunsafe policy p { drop when names.drop_deep(4) }\n")
    assert short.evaluate(rows) == full.evaluate(rows) == [True, True, False]
    d = lint_one("guardpolicy 1\nunsafe policy p { drop when names.drop_deep(1, 2) }\n")
    assert (d.code, d.message) == ("GP2017", "`names.drop_deep` takes 0 to 1 arguments, 2 given")


def test_plugin_paths_are_files_and_nul_bytes_are_refused(tmp_path):
    """A bare file name is a file in the working directory (never the dynamic linker's
    library search: `libz.so.1` must not open the system's zlib); NUL bytes are refused."""
    proc = run_cli("filters", "--plugin", "good.so", cwd=BAD_PLUGIN_DIR)
    assert proc.returncode == 0, proc.stderr
    assert "good.drop_all" in proc.stdout
    proc = run_cli("filters", "--plugin", "libz.so.1", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("guardpolicy: error: ./libz.so.1: cannot load the plugin: ./libz.so.1: cannot open")
    with pytest.raises(ValueError, match="embedded null byte"):
        gp.load_plugin("./a\x00b.so")
    with pytest.raises(ValueError, match="embedded null byte"):
        gp.load_plugin(gp.example_plugin_path("names"), config="strict\x00junk")


TEST_BLOCKS = """guardpolicy 1
unsafe policy p {
  keep when guard_type == SHAPE_ENV
  drop when modinfo.class_name == "Dropout"
}
test p {
  expect keep { guard_type: "SHAPE_ENV" }
  expect drop { guard_type: "ID_MATCH", modinfo.class_name: "Dropout" }
  expect keep { guard_type: "ID_MATCH" }
}
"""


def test_test_blocks_read_plugin_fields_only_when_needed(tmp_path):
    """An expectation decided before a plugin field is read passes without it; one that
    needs a field its plugin cannot give without a Python entry fails on its own line."""
    policy = tmp_path / "p.gpol"
    policy.write_text(TEST_BLOCKS)
    proc = run_cli("test", policy, "--plugin", gp.example_plugin_path("modinfo"))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{policy}:7:3: PASS: policy `p` keep"
    assert lines[1] == f"{policy}:8:3: PASS: policy `p` drop"
    assert lines[2].startswith(f"{policy}:9:3: FAIL: policy `p` could not decide: {gp.example_plugin_path('modinfo')}: "
                               "plugin `modinfo`: field `modinfo.class_name`: needs the Python GuardFilterEntry")
    assert lines[3] == "2 passed, 1 failed"


def test_evaluate_extracts_plugin_fields_a_row_does_not_give():
    """Policy.evaluate runs a plugin field's extractor on the row's core fields, like a
    `test` block; a value given in the row wins."""
    out = run_python(
        """
        import json, sys
        import guardpolicy as gp
        gp.load_plugin(sys.argv[1])
        policy = gp.load("guardpolicy 1\\nunsafe policy p { drop when good.flag }\\n")
        print(json.dumps([policy.evaluate([{}]), policy.evaluate([{"good.flag": False}])]))
        """,
        bad_plugin("good"),
    )
    assert out == [[False], [True]]
