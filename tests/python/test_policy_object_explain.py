"""The Policy object, what it tells: explain, fields, evaluate, saving, and the runtime lines
(``verify``, ``on_violation``, ``dispatch``). No retained references, thread safety and
on_error are test_policy_object_safety.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

import guardpolicy as gp
from policy_entries import DROP_GLOBAL_LINE, KEEP_AMBIENT_LINE, MIXED, Payload, fake_entry


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
