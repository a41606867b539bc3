"""The Policy object, safe to call: no retained references, thread safety, on_error. Explain,
fields and evaluate are test_policy_object_explain.py."""

from __future__ import annotations

import gc
import itertools
import sys
import threading
import types
import warnings
import weakref

import pytest
import torch

import guardpolicy as gp
from policy_entries import MIXED, Payload, fake_entry


_unique = itertools.count()


def unique_name(prefix: str) -> str:
    """PolicyRuntimeWarning is given once per policy name: each test gets its own name."""
    return f"{prefix}_{next(_unique)}_{id(object()) % 100000}"


# --------------------------------------------------------------------------- references


VALUE_POLICY = f"""guardpolicy 1

unsafe policy reads_value {{
  drop when value.type == "{Payload.__module__}.{Payload.__qualname__}" and not value.is_tensor
  drop when value.is_module or value.is_buffer or value.is_parameter
  drop when source.depth > 3 or source.kind == "x" or user_frame.line == 7
  drop when guard_source == GLOBAL or guard_source.is_local and name == "nothing"
}}
"""


@pytest.mark.parametrize("method", ["__call__", "explain"])
def test_no_reference_kept_to_values_or_entries(method):
    policy = gp.load(VALUE_POLICY)
    value = Payload()
    entry = fake_entry(value)
    value_ref, entry_ref = weakref.ref(value), weakref.ref(entry)
    entries = [entry, fake_entry(Payload())]
    decisions = getattr(policy, method)(entries)
    if method == "explain":
        decisions = [x.keep for x in decisions]
    assert decisions == [False, False]  # the value really was read
    del value, entry, entries
    gc.collect()
    assert value_ref() is None
    assert entry_ref() is None


def test_refcounts_unchanged_by_calls(model_entries):
    policy = gp.load(VALUE_POLICY)
    entries = model_entries["mlp"]
    policy(entries)  # warm up lazy imports (torch types)
    gc.collect()
    gc.disable()  # no unrelated collection may move a shared value's count meanwhile
    try:
        before = [sys.getrefcount(e) for e in entries] + [sys.getrefcount(e.value) for e in entries]
        list_before = sys.getrefcount(entries)
        for _ in range(3):
            policy(entries)
            policy.explain(entries)
        after = [sys.getrefcount(e) for e in entries] + [sys.getrefcount(e.value) for e in entries]
        list_after = sys.getrefcount(entries)
    finally:
        gc.enable()
    assert after == before
    assert list_after == list_before


def test_no_reference_kept_after_a_failed_call():
    policy = gp.load('guardpolicy 1\nunsafe policy %s {\n  drop when value.is_tensor\n  drop when guard_source.is_local\n}\n'
                     % unique_name("leak_on_error"))
    value = Payload()
    good = fake_entry(value)
    broken = types.SimpleNamespace(name="y", has_value=True, value=value)  # no orig_guard
    ref = weakref.ref(value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gp.PolicyRuntimeWarning)
        decisions = policy([good, broken])
    assert decisions[1] is True and len(decisions) == 2  # the unreadable entry: on_error keep
    del value, good, broken
    gc.collect()
    assert ref() is None


# --------------------------------------------------------------------------- threads


def test_policy_shared_by_eight_threads(model_entries):
    entries = model_entries["gpt2"]
    policies = [gp.load(MIXED), gp.load(VALUE_POLICY), gp.load_std("keep_portable_guards")]
    expected = [p(entries) for p in policies]
    expected_explain = [p.explain(entries) for p in policies]
    start = threading.Barrier(8)
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def work(i):
        try:
            start.wait()
            out = []
            for _ in range(5):
                for p in policies:
                    out.append(p(entries))
                    out.append(p.explain(entries))
            results[i] = out
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(results) == list(range(8))
    want = []
    for _ in range(5):
        for keep, explain in zip(expected, expected_explain):
            want += [keep, explain]
    for i in range(8):
        assert results[i] == want, i


# --------------------------------------------------------------------------- on_error

READS_GUARD_SOURCE = """guardpolicy 1

unsafe policy {name} {{
  drop when guard_source.is_unspecialized_nn_module
{on_error}}}
"""


def entry_without_orig_guard(name="x"):
    return types.SimpleNamespace(name=name, guard_type="TENSOR_MATCH", is_global=False, has_value=False,
                                 value=None, derived_guard_types=())


def on_error_policy(action: str | None) -> gp.Policy:
    line = f"  on_error {action}\n" if action else ""
    return gp.load(READS_GUARD_SOURCE.format(name=unique_name(f"on_error_{action}"), on_error=line))


def test_unreadable_entry_default_keeps_all_with_warning():
    policy = on_error_policy(None)
    assert policy.on_error == "keep"
    entries = [entry_without_orig_guard("a"), entry_without_orig_guard("b"), entry_without_orig_guard("c")]
    with pytest.warns(gp.PolicyRuntimeWarning, match=policy.name) as record:
        decisions = policy(entries)
    assert decisions == [True, True, True]
    assert all(type(d) is bool for d in decisions)
    assert "orig_guard" in str(record[0].message)
    # Readable entries still get real decisions from the same policy.
    assert policy([fake_entry(Payload())]) == [True]


def test_unreadable_entry_in_a_real_list_is_decided_alone(model_entries):
    """One bad entry among real ones gets the on_error decision; the others keep their real
    decisions, and the list still has the right length."""
    policy = on_error_policy(None)
    real = list(model_entries["mlp"])
    expected = policy(real)
    assert not all(expected)  # the policy does drop some of the real entries
    with pytest.warns(gp.PolicyRuntimeWarning, match="1 of"):
        decisions = policy(real + [entry_without_orig_guard()])
    assert decisions == expected + [True]
    drop = on_error_policy("drop")
    with pytest.warns(gp.PolicyRuntimeWarning):
        assert drop(real + [entry_without_orig_guard()]) == drop(real) + [False]


def test_on_error_keep_explicit():
    policy = on_error_policy("keep")
    assert policy.on_error == "keep"
    with pytest.warns(gp.PolicyRuntimeWarning):
        assert policy([entry_without_orig_guard(), entry_without_orig_guard()]) == [True, True]


def test_on_error_drop():
    policy = on_error_policy("drop")
    assert policy.on_error == "drop"
    with pytest.warns(gp.PolicyRuntimeWarning):
        decisions = policy([entry_without_orig_guard(), entry_without_orig_guard()])
    assert decisions == [False, False]
    assert all(type(d) is bool for d in decisions)


def test_on_error_raise():
    policy = on_error_policy("raise")
    assert policy.on_error == "raise"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning on this path: the error itself surfaces
        with pytest.raises(AttributeError, match="orig_guard"):
            policy([entry_without_orig_guard()])


class _NoTruth:
    def __bool__(self):
        raise ValueError("no truth value")


def test_wrong_attribute_type_falls_back_too():
    """An attribute that cannot be read as its schema type is an unreadable entry, not a
    crash. (Bools are read by truth value, as torch's own filters do: `not e.is_global`.)"""
    policy = gp.load("guardpolicy 1\nunsafe policy %s {\n  drop when is_global\n}\n" % unique_name("wrong_type"))
    with pytest.warns(gp.PolicyRuntimeWarning):
        assert policy([types.SimpleNamespace(is_global=_NoTruth())]) == [True]
    assert policy([types.SimpleNamespace(is_global="yes")]) == [False]  # truthy, like torch
    name_policy = gp.load("guardpolicy 1\nunsafe policy %s {\n  drop when name == \"x\"\n}\n"
                          % unique_name("wrong_name_type"))
    with pytest.warns(gp.PolicyRuntimeWarning):
        assert name_policy([types.SimpleNamespace(name=3)]) == [True]  # a name must be a str


def test_policy_inside_torch_compile_with_default_on_error_keeps_frame(mlp_model):
    """A policy used as guard_filter_fn returns exact bools Dynamo accepts, even on its
    fallback path (here forced by a wrapper that hands over an unreadable extra entry)."""
    policy = on_error_policy(None)
    seen = []

    def wrapper(entries):
        decisions = policy(list(entries) + [entry_without_orig_guard()])
        seen.append(decisions)
        return decisions[:-1]

    compiled = torch.compile(mlp_model.fn, backend="eager", options={"guard_filter_fn": wrapper})
    with pytest.warns(gp.PolicyRuntimeWarning):
        out = compiled(*mlp_model.args)
    torch.testing.assert_close(out, mlp_model.fn(*mlp_model.args))
    assert seen and all(s[-1] is True and all(type(d) is bool for d in s) for s in seen)
