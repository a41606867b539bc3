"""The six standard policies decide exactly like torch.compiler's own ``*_unsafe`` filters,
entry by entry, on the guard entries of three real models."""

from __future__ import annotations

import collections

import pytest
import torch

import guardpolicy as gp
from conftest import MODEL_FACTORIES, MODEL_NAMES, compile_with


def torch_filter(name: str):
    fn = getattr(torch.compiler, f"{name}_unsafe")
    assert callable(fn)
    return fn


def describe(entries, ours, theirs):
    """The first few disagreements, for a readable assertion message."""
    bad = [
        f"#{i} {e.guard_type} name={e.name!r} source={e.orig_guard.source} ours={a} torch={b}"
        for i, (e, a, b) in enumerate(zip(entries, ours, theirs))
        if a != b
    ]
    return f"{len(bad)} disagreements: " + "; ".join(bad[:8])


def assert_exact_bools(decisions, n):
    assert type(decisions) is list
    assert len(decisions) == n
    assert all(type(d) is bool for d in decisions), {type(d) for d in decisions}


def test_std_policies_constant():
    assert gp.STD_POLICIES == (
        "skip_guard_on_inbuilt_nn_modules",
        "skip_guard_on_all_nn_modules",
        "keep_tensor_guards",
        "skip_guard_on_globals",
        "keep_portable_guards",
        "skip_all_guards",
    )
    for name in gp.STD_POLICIES:
        assert gp.std_policy_path(name).is_file()
        assert hasattr(torch.compiler, f"{name}_unsafe")


@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("name", gp.STD_POLICIES)
def test_std_policy_matches_torch(name, model, model_entries, std_policies):
    entries = model_entries[model]
    policy = std_policies[name]
    assert policy.name == name
    assert policy.is_unsafe

    ours = policy(entries)
    theirs = list(torch_filter(name)(entries))

    assert_exact_bools(ours, len(entries))
    assert ours == theirs, describe(entries, ours, theirs)
    # explain() agrees with __call__.
    assert [x.keep for x in policy.explain(entries)] == ours


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_keep_tensor_guards_keep_parameters(model, model_entries):
    entries = model_entries[model]
    policy = gp.load_std("keep_tensor_guards", keep_parameters=True)
    ours = policy(entries)
    theirs = list(torch.compiler.keep_tensor_guards_unsafe(entries, keep_parameters=True))
    assert_exact_bools(ours, len(entries))
    assert ours == theirs, describe(entries, ours, theirs)
    # Explicit False is the default.
    explicit_false = gp.load_std("keep_tensor_guards", keep_parameters=False)(entries)
    assert explicit_false == list(torch.compiler.keep_tensor_guards_unsafe(entries))


def test_keep_parameters_changes_decisions(model_entries):
    """On the nn-module models some TENSOR_MATCH guards are on parameters, so the parameter
    switches a real set of decisions (and only those)."""
    for model in ("mlp", "gpt2"):
        entries = model_entries[model]
        default = gp.load_std("keep_tensor_guards")(entries)
        with_params = gp.load_std("keep_tensor_guards", keep_parameters=True)(entries)
        flipped = [e for e, a, b in zip(entries, default, with_params) if a != b]
        assert flipped, model
        assert all(e.guard_type == "TENSOR_MATCH" and isinstance(e.value, torch.nn.Parameter) for e in flipped)
        assert all(not a and b for a, b in zip(default, with_params) if a != b)


def test_models_offer_a_nontrivial_mix(model_entries, std_policies):
    """The comparison above is only meaningful if the policies really split the entries."""
    for model in ("mlp", "gpt2"):
        entries = model_entries[model]
        kinds = collections.Counter(str(e.orig_guard.source) for e in entries)
        assert kinds["GuardSource.LOCAL_UNSPECIALIZED_BUILTIN_NN_MODULE"] > 0, kinds
        for name in ("skip_guard_on_inbuilt_nn_modules", "skip_guard_on_all_nn_modules",
                     "keep_tensor_guards", "skip_guard_on_globals", "keep_portable_guards"):
            decisions = std_policies[name](entries)
            assert True in decisions and False in decisions, (model, name)
        # all nn modules drops strictly more than built-in nn modules only.
        inbuilt = std_policies["skip_guard_on_inbuilt_nn_modules"](entries)
        all_nn = std_policies["skip_guard_on_all_nn_modules"](entries)
        assert all(a or not b for a, b in zip(inbuilt, all_nn))  # all_nn keeps => inbuilt keeps
        assert sum(all_nn) < sum(inbuilt) < len(entries)

    globals_entries = model_entries["global_fn"]
    names = [e.name for e in globals_entries]
    assert "G['GLOBAL_INT']" in names
    decisions = std_policies["skip_guard_on_globals"](globals_entries)
    assert decisions[names.index("G['GLOBAL_INT']")] is False
    assert decisions[names.index("x")] is True
    assert std_policies["skip_all_guards"](globals_entries) == [False] * len(globals_entries)


@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("name", gp.STD_POLICIES)
@pytest.mark.parametrize("kind", ["std", "builtin"])
def test_std_policy_as_guard_filter_fn(kind, name, model):
    """End to end: the std policy, or the native built-in filter, is torch.compile's
    guard_filter_fn (Dynamo checks the length and the exact-bool contract), the compiled
    model still computes the eager result, and the decisions it made inside Dynamo equal
    torch's on the same entries."""
    m = MODEL_FACTORIES[model]()
    policy = gp.load_std(name) if kind == "std" else gp.filter(f"builtin.{name}")
    seen = []

    def spy(entries):
        decisions = policy(entries)
        seen.append((list(entries), decisions))
        return decisions

    compiled = compile_with(m.fn, spy)
    with torch.no_grad():
        expected = m.fn(*m.args)
        got = compiled(*m.args)
        again = compiled(*m.args)
    assert seen
    for entries, decisions in seen:
        assert_exact_bools(decisions, len(entries))
        assert decisions == list(torch_filter(name)(entries))
    if model == "gpt2":
        expected, got, again = expected.last_hidden_state, got.last_hidden_state, again.last_hidden_state
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(again, expected)


# --------------------------------------------------------------------------- native built-ins

# torch's six filters are also implemented natively (core/src/plugin/builtin_filters.cpp, namespace `builtin`).
# Four ways to run each must decide exactly like torch.compiler.<name>_unsafe: the native
# filter through the registry, `use builtin.<name>` in a policy, the filter called in a
# condition (`drop when builtin.<name>()` is true exactly where it drops) and the std policy.


def use_builtin(name: str, args: str = "") -> gp.Policy:
    return gp.load(f"guardpolicy 1\n\nunsafe policy use_{name} {{\n  use builtin.{name}{args}\n  default keep\n}}\n")


def call_builtin(name: str, args: str = "") -> gp.Policy:
    """A call gives every argument (GP2017 otherwise): keep_tensor_guards(false) here."""
    if name == "keep_tensor_guards" and not args:
        args = "false"
    return gp.load(f"guardpolicy 1\n\nunsafe policy call_{name} {{\n  drop when builtin.{name}({args})\n}}\n")


def test_builtin_filters_are_registered():
    builtin = [f for f in gp.filters() if f.kind == "builtin"]
    assert sorted(f.name for f in builtin) == sorted(f"builtin.{name}" for name in gp.STD_POLICIES)
    assert all(f.origin == "builtin" and f.doc.startswith(f"torch.compiler.{f.name[8:]}_unsafe") for f in builtin)
    params = {f.name: f.params for f in builtin}
    assert params["builtin.keep_tensor_guards"] == (gp.FilterParam("keep_parameters", "bool", False, True),)
    assert all(p == () for n, p in params.items() if n != "builtin.keep_tensor_guards")


@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("name", gp.STD_POLICIES)
def test_builtin_filter_matches_std_and_torch(name, model, model_entries, std_policies):
    entries = model_entries[model]
    theirs = list(torch_filter(name)(entries))
    native_policy = gp.filter(f"builtin.{name}")
    assert native_policy.is_unsafe
    native = native_policy(entries)
    assert_exact_bools(native, len(entries))
    assert native == theirs, describe(entries, native, theirs)
    assert std_policies[name](entries) == native
    for policy in (use_builtin(name), call_builtin(name)):
        ours = policy(entries)
        assert_exact_bools(ours, len(entries))
        assert ours == theirs, f"{policy.name}: " + describe(entries, ours, theirs)
    # explain() names the filter as the deciding rule of every drop.
    for x in native_policy.explain(entries):
        assert (x.rule.policy if x.rule else None) == (None if x.keep else f"builtin.{name}")


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_builtin_keep_tensor_guards_keep_parameters(model, model_entries):
    entries = model_entries[model]
    theirs = list(torch.compiler.keep_tensor_guards_unsafe(entries, keep_parameters=True))
    candidates = {
        "registry": gp.filter("builtin.keep_tensor_guards", keep_parameters=True),
        "std": gp.load_std("keep_tensor_guards", keep_parameters=True),
        "use": use_builtin("keep_tensor_guards", "(keep_parameters = true)"),
        "call": call_builtin("keep_tensor_guards", "true"),
    }
    for how, policy in candidates.items():
        ours = policy(entries)
        assert_exact_bools(ours, len(entries))
        assert ours == theirs, f"{how}: " + describe(entries, ours, theirs)
    # keep_parameters=False explicitly is the default, natively too.
    default = list(torch.compiler.keep_tensor_guards_unsafe(entries))
    assert gp.filter("builtin.keep_tensor_guards", keep_parameters=False)(entries) == default
    assert use_builtin("keep_tensor_guards", "(keep_parameters = false)")(entries) == default
    if model != "global_fn":  # the nn-module models have parameters: the switch matters
        assert default != theirs
