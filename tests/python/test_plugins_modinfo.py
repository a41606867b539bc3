"""The ``modinfo`` example plugin (fields read from the guarded Python value: class name,
tensor dtype and size) on the real models and in real ``torch.compile`` runs: its fields equal
what Python says of each value; module_kinds.gpol and policies that drop by class name or
numel drop exactly the guards they name, and a change to what they dropped goes unseen while
keep_all.gpol recompiles.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch._dynamo

import guardpolicy as gp
from conftest import MODEL_NAMES
from plugin_harness import (BLOCK_INPUT, KEEP_ALL, MODULE_KINDS, LoudDropout, Spy, TripleLinear, compile_and_check,
                            decisions_by_guard, fail_on_recompile, make_block, recompiles)

pytestmark = pytest.mark.usefixtures("example_plugins")


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
