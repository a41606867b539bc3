"""The Policy object: explain, fields, no retained references, thread safety, on_error."""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import textwrap
import threading
import types
import warnings
import weakref

import pytest
import torch

import guardpolicy as gp

MIXED = """guardpolicy 1

unsafe policy mixed {
  keep when guard_type in {GLOBAL_STATE, SHAPE_ENV}
  drop when is_global
  use skip_guard_on_all_nn_modules
  default keep
}
"""
# Lines of the rules above.
KEEP_AMBIENT_LINE, DROP_GLOBAL_LINE = 4, 5

_unique = itertools.count()


def unique_name(prefix: str) -> str:
    """PolicyRuntimeWarning is given once per policy name: each test gets its own name."""
    return f"{prefix}_{next(_unique)}_{id(object()) % 100000}"


# --------------------------------------------------------------------------- explain


def test_explain_names_the_deciding_rule(model_entries):
    policy = gp.load(MIXED)
    entries = model_entries["mlp"]
    explanations = policy.explain(entries)
    assert len(explanations) == len(entries)
    assert [x.keep for x in explanations] == policy(entries)

    std_file = str(gp.std_policy_path("skip_guard_on_all_nn_modules"))
    seen = set()
    for entry, x in zip(entries, explanations):
        assert x.name == entry.name and x.guard_type == entry.guard_type
        assert x.decision == ("keep" if x.keep else "drop")
        if entry.guard_type in ("GLOBAL_STATE", "SHAPE_ENV"):
            expected = ("mixed", "<string>", KEEP_AMBIENT_LINE, "keep")
        elif entry.is_global:
            expected = ("mixed", "<string>", DROP_GLOBAL_LINE, "drop")
        elif entry.orig_guard.source.is_unspecialized_nn_module():
            # A rule brought in by `use` is reported where it is written: in the std file.
            expected = ("skip_guard_on_all_nn_modules", std_file, 6, "drop")
        else:
            assert x.rule is None, (entry.name, entry.guard_type, x.rule)
            assert x.keep is True  # the default
            seen.add(None)
            continue
        rule = x.rule
        assert rule is not None, (entry.name, entry.guard_type)
        assert (rule.policy, rule.file, rule.line, rule.decision) == expected
        assert x.keep == (expected[3] == "keep")
        assert rule.column == 3
        assert str(rule) == f"{expected[0]} at {expected[1]}:{expected[2]}"
        seen.add(expected[2])
    assert seen == {KEEP_AMBIENT_LINE, DROP_GLOBAL_LINE, 6, None}  # every path exercised


def test_explain_from_file_reports_file_and_line(tmp_path, model_entries):
    path = tmp_path / "p.gpol"
    path.write_text(MIXED)
    policy = gp.load(path)
    rules = policy.rules
    assert [(r.policy, r.file, r.line, r.decision) for r in rules] == [
        ("mixed", str(path), KEEP_AMBIENT_LINE, "keep"),
        ("mixed", str(path), DROP_GLOBAL_LINE, "drop"),
        ("skip_guard_on_all_nn_modules", str(gp.std_policy_path("skip_guard_on_all_nn_modules")), 6, "drop"),
    ]
    x = policy.explain(model_entries["global_fn"])
    by_name = {e.name: e for e in x}
    assert by_name["G['GLOBAL_INT']"].rule == rules[1]
    assert by_name["x"].rule is None


def test_default_drop_explained_as_none(model_entries):
    policy = gp.load_std("skip_all_guards")
    x = policy.explain(model_entries["global_fn"])
    assert x and all(e.rule is None and e.keep is False and e.decision == "drop" for e in x)
    assert policy.default_decision == "drop"


# --------------------------------------------------------------------------- fields


def test_fields_lists_only_fields_read():
    assert gp.load(MIXED).fields == ["guard_type", "is_global", "guard_source.is_unspecialized_nn_module"]
    assert gp.load_std("skip_all_guards").fields == []
    assert gp.load_std("skip_guard_on_globals").fields == ["is_global"]
    assert gp.load_std("keep_tensor_guards").fields == ["guard_type", "value.is_parameter"]
    # keep_parameters=True is a constant: `true or not value.is_parameter` reads nothing.
    assert gp.load_std("keep_tensor_guards", keep_parameters=True).fields == ["guard_type"]
    p = gp.load('guardpolicy 1\nunsafe policy p {\n  drop when name == "a" and name != "b"\n}\n')
    assert p.fields == ["name"]  # a field read twice is one slot


def test_entries_need_only_the_fields_read():
    """An entry object with only the attributes in `fields` is enough (nothing else is read)."""
    policy = gp.load_std("skip_guard_on_globals")

    class OnlyIsGlobal:
        __slots__ = ("is_global",)

        def __init__(self, g):
            self.is_global = g

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert policy([OnlyIsGlobal(True), OnlyIsGlobal(False)]) == [False, True]


# --------------------------------------------------------------------------- references


class Payload:
    """A weak-referenceable guard value."""


class Entry(types.SimpleNamespace):
    """A hand-built guard entry (SimpleNamespace itself cannot be weakly referenced)."""

    __slots__ = ("__weakref__",)


def fake_entry(value, **kw):
    fields = dict(name="self.w", has_value=True, value=value, guard_type="TENSOR_MATCH",
                  derived_guard_types=("TENSOR_MATCH",), is_global=False,
                  orig_guard=types.SimpleNamespace(
                      source=types.SimpleNamespace(
                          name="LOCAL",
                          is_local=lambda: True,
                          is_unspecialized_nn_module=lambda: False,
                          is_unspecialized_builtin_nn_module=lambda: False,
                          is_specialized_nn_module=lambda: False,
                          is_fsdp_module=lambda: False),
                      originating_source=types.SimpleNamespace(),
                      user_stack=None))
    fields.update(kw)
    return Entry(**fields)


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


# --------------------------------------------------------------------------- evaluate


def test_evaluate_rows():
    policy = gp.load(MIXED)
    rows = [{"guard_type": "SHAPE_ENV", "is_global": True}, {"is_global": True},
            {"guard_source.is_unspecialized_nn_module": True}, {}]
    assert policy.evaluate(rows) == [True, False, False, True]
    # Same program as __call__ on entry objects.
    entry = fake_entry(Payload(), guard_type="SHAPE_ENV", is_global=True)
    assert policy([entry]) == [True]


def test_evaluate_absent_enum_field_is_no_member():
    """docs: in evaluate() rows, absent fields read as false, 0 or "". An absent enum field
    must not read as the enum's first member (GuardSource LOCAL, GuardType
    AUTOGRAD_SAVED_TENSORS_HOOKS)."""
    by_source = gp.load("guardpolicy 1\nunsafe policy s {\n  drop when guard_source == LOCAL\n}\n")
    assert by_source.evaluate([{"guard_source": "GLOBAL"}, {"guard_source": "LOCAL"}]) == [True, False]
    assert by_source.evaluate([{}]) == [True]
    by_type = gp.load("guardpolicy 1\nunsafe policy t {\n  drop when guard_type == AUTOGRAD_SAVED_TENSORS_HOOKS\n}\n")
    assert by_type.evaluate([{"guard_type": "TENSOR_MATCH"}]) == [True]
    assert by_type.evaluate([{}]) == [True]


def test_evaluate_accepts_any_mapping():
    """Policy.evaluate takes ``Sequence[Mapping]``. A Mapping that is not a dict must work
    (or raise), never crash the interpreter: run it in a child process."""
    code = textwrap.dedent("""
        import collections.abc, types
        import guardpolicy as gp
        p = gp.load_std("skip_guard_on_globals")

        class Row(collections.abc.Mapping):
            def __init__(self, d): self.d = d
            def __getitem__(self, k): return self.d[k]
            def __iter__(self): return iter(self.d)
            def __len__(self): return len(self.d)

        print(p.evaluate([Row({"is_global": True}), Row({})]))
        print(p.evaluate([types.MappingProxyType({"is_global": True})]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.split("\n")[:2] == ["[False, True]", "[False]"]


def test_evaluate_raises_on_unreadable_rows_and_explain_takes_any_iterable():
    policy = gp.load_std("keep_tensor_guards")
    with pytest.raises((TypeError, ValueError)):
        policy.evaluate([{"guard_type": "ID_MATCH"}, {"guard_type": 5}])
    rows = [{"guard_type": "TENSOR_MATCH", "name": "x"}, {"guard_type": "ID_MATCH", "name": "y"}]
    explained = policy.explain(row for row in rows)  # a generator
    assert [(e.keep, e.name, e.guard_type) for e in explained] == [(True, "x", "TENSOR_MATCH"), (False, "y", "ID_MATCH")]
    assert explained[0].rule.line == 6 and explained[1].rule is None


def test_saved_policies_get_normal_file_permissions(tmp_path):
    import os
    import stat

    path = tmp_path / "p.gpolc"
    gp.load_std("skip_all_guards").save(path)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert gp.load(path).name == "skip_all_guards"


# --------------------------------------------------------------------------- runtime lines
RUNTIME_LINES = """guardpolicy 1
unsafe policy verified {
  use skip_guard_on_all_nn_modules
  verify every 100 calls
  on_violation raise
  dispatch direct
}
"""


def test_runtime_lines_are_exposed_and_survive_save_and_pickle(tmp_path):
    import pickle

    policy = gp.load(RUNTIME_LINES)
    assert policy.verify == (100, "raise")
    assert policy.dispatch == "direct"
    path = tmp_path / "verified.gpolc"
    policy.save(path)
    for again in (gp.load(path), pickle.loads(pickle.dumps(policy))):
        assert again.verify == (100, "raise")
        assert again.dispatch == "direct"


def test_runtime_lines_default_and_absent():
    assert gp.load("guardpolicy 1\npolicy p { verify every 7 calls }\n").verify == (7, "recompile")
    plain = gp.load("guardpolicy 1\npolicy p { keep when true }\n")
    assert plain.verify is None and plain.dispatch is None


@pytest.mark.parametrize("line, code", [
    ("verify every 0 calls", "GP2018"),
    ("verify every 5 calls on_violation stale", "GP2018"),
    ("verify every calls", "GP1001"),
    ("verify every 5 calls\n on_violation recompil", "GP2018"),
    ("on_violation warn", "GP2018"),
    ("dispatch fast", "GP2019"),
])
def test_bad_runtime_lines_are_refused_with_their_code(line, code):
    with pytest.raises(gp.PolicyError) as err:
        gp.load(f"guardpolicy 1\npolicy p {{\n {line}\n}}\n")
    assert code in str(err.value)
