"""``python -m guardpolicy audit``: the soundness audit, on a few changes of the MLP.

keep_all (every guard kept) must never be stale: each change either recompiles or leaves
the output equal to eager's. skip_all_guards must be stale on a float module attribute, and
the cell must name the dropped guard that let it through (``self.scale``, CONSTANT_MATCH).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import guardpolicy as gp
from guardpolicy.tools import audit
from guardpolicy.tools.audit import model as audit_model

KEEP_ALL_FILE = Path(__file__).resolve().parents[2] / "policies" / "examples" / "keep_all.gpol"


def changes(*keys):
    return tuple(c for c in audit.CHANGES if c.key in keys)


def test_keep_all_file_keeps_every_guard():
    assert gp.lint(KEEP_ALL_FILE) == []
    policy = gp.load(KEEP_ALL_FILE)
    builtin = audit.resolve_policy("keep_all")[2]  # the installed copy, from any directory
    assert policy.name == builtin.name == "keep_all"
    assert not policy.is_unsafe and policy.rules == [] and policy.default_decision == "keep"
    rows = [{"guard_type": t, "name": n} for t in ("SHAPE_ENV", "GLOBAL_STATE", "TENSOR_MATCH", "ID_MATCH")
            for n in ("", "x", "self.scale", "G['AUDIT_SCALE']")]
    assert policy.evaluate(rows) == builtin.evaluate(rows) == [True] * len(rows)


def test_change_keys_cover_the_brief():
    assert set(audit.CHANGE_KEYS) >= {
        "float_attr", "int_attr", "submodule_swap", "param_replaced", "buffer_in_place", "train",
        "global_const", "global_dict", "closure", "input_dtype", "input_shape", "requires_grad",
        "grad_mode", "default_dtype", "forward_hook"}


def test_keep_all_is_never_stale():
    label, _, policy = audit.resolve_policy("keep_all")
    result = audit.audit_policy("mlp", label, "keep_all", policy,
                                changes("float_attr", "global_const", "input_dtype", "buffer_in_place"))
    assert result.offered > 0 and result.dropped == 0 and result.frames == 1
    outcomes = {c.change: c.outcome for c in result.cells}
    assert outcomes == {"float_attr": "recompiled", "global_const": "recompiled",
                        "input_dtype": "recompiled", "buffer_in_place": "unaffected"}
    assert audit_model.AUDIT_SCALE == 1.0  # the global change was undone (where the forward reads it)


def test_skip_all_guards_is_stale_on_float_attribute_cli(tmp_path, capsys):
    out = tmp_path / "audit.json"
    rc = audit.main(["--model", "mlp", "--policy", "keep_all", "skip_all_guards",
                     "--change", "float_attr", "--json", str(out), "-q"])
    assert rc == 0
    report = json.loads(out.read_text())
    keep_all, skip_all = report["models"]["mlp"]
    assert keep_all["policy"] == "keep_all" and keep_all["guards_dropped"] == 0
    assert keep_all["changes"]["float_attr"]["outcome"] == "recompiled"

    assert skip_all["policy"] == "skip_all_guards" and skip_all["guards_dropped"] == skip_all["guards_offered"]
    cell = skip_all["changes"]["float_attr"]
    assert cell["outcome"] == "stale"
    assert {"name": "self.scale", "guard_type": "CONSTANT_MATCH"} in cell["dropped_guards"]
    assert cell["control_no_filter"] == "recompiled"  # torch itself guards it: the policy dropped it
    assert report["keep_all_violations"] == {"guardpolicy_bugs": [], "torch_unguarded": []}

    text = capsys.readouterr().out
    assert "float_attr" in text and "STALE" in text and "self.scale (CONSTANT_MATCH)" in text


def test_bad_change_key_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        audit.main(["--change", "no_such_change"])
    assert exc.value.code == 2
