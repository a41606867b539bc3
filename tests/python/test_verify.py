"""Verify: the guards a policy dropped, re-checked on sampled calls by torch's guard manager.

Real torch.compile runs (backend="eager") of the audit models (guardpolicy.tools.audit):
a change the policy let go stale is caught before the stale result is served."""

import gc
import logging
import pickle
import weakref

import pytest
import torch

import guardpolicy as gp
from guardpolicy.runtime.call import call_path as calls
from guardpolicy.tools import audit

NN = gp.load_std("skip_guard_on_all_nn_modules")
CHANGES = {c.key: c for c in audit.CHANGES}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread, as the bench runs: these tiny models only wait on more."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _compiled(policy=NN, model_name="mlp", **kwargs):
    torch._dynamo.reset()
    model, inputs = audit.build_audit_model(model_name)
    return model, inputs, gp.compile(model, policy, backend="eager", **kwargs)


def _warm(opt, inputs, calls_=2):
    with torch.no_grad():
        for _ in range(calls_):
            opt(*inputs)


def test_recompile_serves_eager_output_on_the_first_changed_call():
    model, inputs, opt = _compiled(verify=1)
    _warm(opt, inputs)
    model.scale = 2.0
    with torch.no_grad():
        ref = model(*inputs)
        out = opt(*inputs)
    assert audit.compare(out, ref) is None
    st = gp.stats(opt)
    assert st.compiles == 2 and st.calls == 3 and st.verified_calls == 3
    [violation] = st.violations
    assert violation.call == 3 and violation.action == "recompile"
    assert [(g.name, g.guard_type) for g in violation.guards] == [("self.scale", "CONSTANT_MATCH")]
    rule = violation.guards[0].rule
    assert rule.policy == "skip_guard_on_all_nn_modules" and rule.file.endswith("skip_guard_on_all_nn_modules.gpol")
    assert rule.line == 6  # `drop when guard_source.is_unspecialized_nn_module`
    assert violation.frame.function == "forward" and violation.frame.compile_id == "0/0"
    assert "self.scale == 1.0" in violation.reason


def test_without_verify_the_same_change_is_served_stale():
    """The control: what verify prevents."""
    model, inputs, opt = _compiled()
    _warm(opt, inputs)
    model.scale = 2.0
    with torch.no_grad():
        assert audit.compare(opt(*inputs), model(*inputs)) is not None
    assert gp.stats(opt).compiles == 1 and gp.stats(opt).violations == []


def test_raise_names_frame_guard_and_rule_and_does_not_run_the_call():
    model, inputs, opt = _compiled(verify=1, on_violation="raise")
    _warm(opt, inputs)
    model.train()
    with torch.no_grad(), pytest.raises(gp.StaleGuardError) as info:
        opt(*inputs)
    text = str(info.value)
    assert "self._modules['drop'].training` (CONSTANT_MATCH)" in text
    assert "skip_guard_on_all_nn_modules.gpol:6" in text and "forward at " in text
    assert info.value.violation.guards[0].name == "self._modules['drop'].training"
    assert gp.stats(opt).compiles == 1  # nothing recompiled: the call did not run


def _dropped_on(opt, name: str) -> list[str]:
    """The guard types of the dropped guards on ``name`` in the first frame, in the order torch
    offered them: on ``self.shift`` (an int), EQUALS_MATCH and CONSTANT_MATCH on torch 2.13+,
    EQUALS_MATCH only on 2.11."""
    return [e.guard_type for e in gp.explain(opt)[0] if e.name == name and not e.keep]


def test_warn_warns_once_per_failed_guard_logs_and_runs_the_stale_code(caplog):
    model, inputs, opt = _compiled(verify=1, on_violation="warn")
    _warm(opt, inputs)
    model.shift = 1
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="guardpolicy"):
        with pytest.warns(gp.StaleGuardWarning) as record:
            out = opt(*inputs)
        ref = model(*inputs)
    assert audit.compare(out, ref) is not None  # warn: the cached (stale) code ran
    texts = [str(w.message) for w in record if issubclass(w.category, gp.StaleGuardWarning)]
    dropped = _dropped_on(opt, "self.shift")
    assert "EQUALS_MATCH" in dropped and len(texts) == len(dropped)  # one per failed dropped guard
    assert {w.filename for w in record} == {__file__}  # the line that called opt, not torch's module.py
    assert all(f"`self.shift` ({t})" in text for text, t in zip(texts, dropped)), texts
    [log_line] = [r.getMessage() for r in caplog.records if r.name == "guardpolicy"]
    assert "self.shift" in log_line and "on_violation warn" in log_line


def test_warn_on_the_direct_path_warns_once_per_guard_and_the_direct_call_goes_on():
    """dispatch="direct" (issue 19): a violation found on the direct path is handled as on
    the normal one; under warn the stale code runs, still directly."""
    from guardpolicy.runtime.call import dispatch

    model, inputs, opt = _compiled(verify=1, on_violation="warn", dispatch="direct")
    _warm(opt, inputs, dispatch.DEFAULT_WARMUP + 2)  # warm-up, the capturing call, one direct call
    st, d = gp.stats(opt), gp.stats(opt).dispatch
    assert d.state == "direct" and d.direct_calls == 1
    with torch.no_grad():
        before = opt(*inputs)
    model.shift = 1
    dropped = _dropped_on(opt, "self.shift")
    assert "EQUALS_MATCH" in dropped
    for n in (1, 2):
        with torch.no_grad(), pytest.warns(gp.StaleGuardWarning) as record:
            out = opt(*inputs)
        texts = [str(w.message) for w in record]
        assert len(texts) == len(dropped), texts  # one per failed dropped guard on self.shift
        assert all(f"`self.shift` ({t})" in text for text, t in zip(texts, dropped)), texts
        assert {w.filename for w in record} == {__file__}  # the caller's line, not dispatch.py
        assert torch.equal(out, before)  # the cached (stale) code ran
        assert d.state == "direct" and d.direct_calls == 2 + n and not d.fallbacks
        assert len(st.violations) == n and st.violations[-1].action == "warn"
    assert st.compiles == 1
    with torch.no_grad():
        assert audit.compare(out, model(*inputs)) is not None  # stale indeed


def test_a_warning_names_the_caller_of_a_compiled_function_too():
    model, inputs = audit.build_audit_model("mlp")
    torch._dynamo.reset()
    fn = gp.compile(lambda x: model(x), NN, backend="eager", verify=1, on_violation="warn")
    with torch.no_grad():
        fn(*inputs)
        model.scale = 2.0
        with pytest.warns(gp.StaleGuardWarning) as record:
            fn(*inputs)
    assert [w.filename for w in record] == [__file__]
    assert "dropped guard `model.scale` (CONSTANT_MATCH)" in str(record[0].message)  # the closure's cell


def test_sampling_is_every_nth_call_by_count():
    model, inputs, opt = _compiled(verify=4)
    _warm(opt, inputs, 9)
    st = gp.stats(opt)
    assert st.calls == 9 and st.verified_calls == 2  # calls 4 and 8
    model.scale = 2.0
    with torch.no_grad():
        stale = [audit.compare(opt(*inputs), model(*inputs)) is not None for _ in range(4)]
    assert stale == [True, True, False, False]  # calls 10, 11 stale; 12 verified and recompiled
    assert [v.call for v in st.violations] == [12]


VERIFY_LINES = """guardpolicy 1

unsafe policy nn_verified {
  use skip_guard_on_all_nn_modules
  default keep
  verify every 3 calls
  on_violation raise
}
"""


def test_policy_verify_lines_are_the_default_and_keywords_override_them():
    policy = gp.load(VERIFY_LINES)
    assert policy.verify == (3, "raise")
    model, inputs, opt = _compiled(policy)
    st = gp.stats(opt)
    assert (st.verify_every, st.on_violation) == (3, "raise")
    _warm(opt, inputs, 2)
    model.scale = 2.0
    with torch.no_grad(), pytest.raises(gp.StaleGuardError, match="self.scale"):
        opt(*inputs)  # call 3
    model2, inputs2, opt2 = _compiled(policy, verify=0)
    assert gp.stats(opt2).verify_every == 0 and gp.stats(opt2).calls is None
    model3, inputs3, opt3 = _compiled(policy, on_violation="warn")
    assert (gp.stats(opt3).verify_every, gp.stats(opt3).on_violation) == (3, "warn")


@pytest.mark.parametrize("kwargs, message", [
    ({"verify": -1}, "verify must be a number of calls"),
    ({"verify": True}, "verify must be a number of calls"),
    ({"verify": 2, "on_violation": "ignore"}, "on_violation must be one of recompile, raise, warn"),
])
def test_bad_verify_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gp.compile(torch.nn.Linear(2, 2), NN, backend="eager", **kwargs)


def test_a_torch_without_the_full_guard_set_fails_at_compile(monkeypatch):
    from guardpolicy.runtime import torch_internals

    monkeypatch.setattr(torch_internals.guards, "_FAIL_REASON", None)
    with pytest.raises(RuntimeError, match="get_guard_fail_reason_helper.*cannot be kept"):
        gp.compile(torch.nn.Linear(2, 2), NN, backend="eager", verify=1)


def test_torch_2_13_builds_the_full_manager_before_the_filter():
    from guardpolicy.runtime import torch_internals

    assert torch_internals.missing_for_verify() == []


def test_without_verify_no_call_path_is_added():
    model, inputs, opt = _compiled()
    assert not isinstance(opt.forward, calls.CallPath)
    model, inputs, opt = _compiled(verify=5)
    assert isinstance(opt.forward, calls.CallPath)


def test_function_with_a_closure_is_verified():
    state = {"k": 1.0}
    factor = 2.0

    def fn(x, *, bias=0.5):
        return x * factor + state["k"] + bias

    torch._dynamo.reset()
    opt = gp.compile(fn, gp.load_std("skip_all_guards"), backend="eager", verify=1)
    x = torch.ones(3)
    assert torch.equal(opt(x), fn(x))
    state["k"] = 5.0
    assert torch.equal(opt(x), fn(x))  # the dropped guard on the closure's dict caught it
    [violation] = gp.stats(opt).violations
    assert violation.frame.function == "fn"
    assert any("state" in g.name for g in violation.guards)


def test_agree_seam_sees_every_sampled_verdict_and_decides():
    model, inputs, opt = _compiled(verify=2)
    seen = []

    def agree(verdict):
        seen.append((verdict.call, verdict.stale))
        return verdict

    opt.forward.agree = agree
    _warm(opt, inputs, 4)
    model.scale = 2.0
    _warm(opt, inputs, 2)
    assert seen == [(2, False), (4, False), (6, True)]


def test_unchanged_state_never_raises_over_10000_calls():
    model, inputs, opt = _compiled(gp.load_std("skip_all_guards"), verify=1, on_violation="raise")
    _warm(opt, inputs, 10_000)
    st = gp.stats(opt)
    assert st.verified_calls == 10_000 and st.violations == [] and st.compiles == 1


def test_verify_keeps_nothing_alive():
    model, inputs, opt = _compiled(gp.load_std("skip_all_guards"), verify=1)
    _warm(opt, inputs, 3)
    model.scale = 2.0
    _warm(opt, inputs, 1)  # a violation, an invalidated entry and a recompile
    assert len(gp.stats(opt).guards) == 1  # the live entry's; the invalidated one is freed
    ref = weakref.ref(model)
    del model, opt
    torch._dynamo.reset()
    gc.collect()
    assert ref() is None


def test_full_managers_are_freed_with_their_cache_entries():
    model, inputs, opt = _compiled(verify=1)
    _warm(opt, inputs, 2)
    st = gp.stats(opt)
    assert len(st.guards) == 1
    torch._dynamo.reset()
    gc.collect()
    assert len(st.guards) == 0


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = 1.0

    def forward(self, x):
        return self.fc(x) * self.scale


def test_pickle_and_deepcopy_keep_verify():
    import copy

    torch._dynamo.reset()
    opt = gp.compile(Scaled(), NN, backend="eager", verify=3, on_violation="warn")
    _warm(opt, (torch.randn(2, 4),), 2)
    for other in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        st = gp.stats(other)
        assert (st.verify_every, st.on_violation, st.calls) == (3, "warn", 2)
        assert isinstance(other.forward, calls.CallPath)
        x = torch.randn(2, 4)
        other(x)  # call 3: verified (nothing compiled for the copy yet), then compiled
        other._orig_mod.scale = 2.0
        with pytest.warns(gp.StaleGuardWarning, match="self.scale"):
            for _ in range(3):  # call 6 is verified
                other(x)
        assert [v.call for v in st.violations] == [6]


# --------------------------------------------------------------------------- dry-run


def test_dry_run_attributes_the_train_recompile_to_the_rule_that_would_drop_its_guard(tmp_path):
    model, inputs, opt = _compiled(dry_run=True)
    with torch.no_grad():
        for _ in range(2):  # a train/eval loop
            model.train()
            train_out = [opt(*inputs) for _ in range(2)]
            assert audit.compare(train_out[-1], model(*inputs)) is None  # every guard kept: never stale
            model.eval()
            for _ in range(2):
                opt(*inputs)
    st = gp.stats(opt)
    assert st.compiles == 2 and st.violations == []
    [event] = st.dry_run_events  # train() recompiled once; eval's entry was there already
    assert [(g.name, g.guard_type) for g in event.guards] == [("self._modules['drop'].training", "CONSTANT_MATCH")]
    rule = event.guards[0].rule
    assert rule.file.endswith("skip_guard_on_all_nn_modules.gpol") and rule.line == 6
    assert (event.frame.compile_id, event.recompile.compile_id) == ("0/0", "0/1")
    text = gp.dry_run_report(opt).to_text()
    assert not event.known_stale  # a flag (CONSTANT_MATCH): the code may compute the same; verify tells
    assert "a dropped guard failed: the policy would have skipped this recompile under" in text
    assert "skip_guard_on_all_nn_modules.gpol:6" in text
    data = gp.dry_run_report(opt).to_json()
    assert data["events"][0]["guards"][0]["rule"]["line"] == 6
    assert data["frames"][0]["would_drop"] == sum(not e.keep for e in st.explanations[0]) > 0


def test_dry_run_does_not_attribute_a_recompile_the_policy_makes_too():
    model, inputs, opt = _compiled(dry_run=True)
    with torch.no_grad():
        opt(*inputs)
        opt(inputs[0].to(torch.float64))  # the input's TENSOR_MATCH fails: the policy keeps it
    st = gp.stats(opt)
    assert st.compiles == 2 and st.dry_run_events == []


def test_dry_run_report_is_written_at_exit(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "report.json"
    script = f"""
import torch, guardpolicy as gp
from guardpolicy.tools import audit
model, (x,) = audit.build_audit_model("mlp")
opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", dry_run={str(out)!r})
with torch.no_grad():
    opt(x); model.train(); opt(x)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["policy"] == "skip_guard_on_all_nn_modules"
    assert report["events"][0]["guards"][0]["name"] == "self._modules['drop'].training"


def test_dry_run_and_verify_together_are_refused():
    with pytest.raises(ValueError, match="dry_run keeps every guard"):
        gp.compile(torch.nn.Linear(2, 2), NN, backend="eager", verify=1, dry_run=True)


# --------------------------------------------------------------------------- audit --verify


def test_audit_verify_says_per_stale_cell_whether_and_when_verify_caught_it(tmp_path, capsys):
    import json

    out = tmp_path / "audit.json"
    rc = audit.main(["--model", "mlp", "--policy", "skip_guard_on_all_nn_modules", "--change",
                     "float_attr,train,forward_hook,input_shape", "--verify", "5", "--json", str(out), "-q"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["verify"] == 5
    cells = report["models"]["mlp"][0]["changes"]
    for key in ("float_attr", "train"):
        assert cells[key]["outcome"] == "stale"
        v = cells[key]["verify"]
        assert v["caught"] and 1 <= v["after_calls"] <= 5 and v["output_ok"], (key, v)
    hook = cells["forward_hook"]
    assert hook["outcome"] == "stale" and hook["control_no_filter"].startswith("stale")
    assert hook["verify"]["caught"] is False  # torch has no guard for it: nothing to re-check
    assert "verify" not in cells["input_shape"]  # recompiled: a kept guard caught it
    text = capsys.readouterr().out
    assert "verify=5: caught after" in text and "verify=5: not caught" in text and "✓" in text


def test_audit_verify_goes_through_an_error_cell(tmp_path):
    """input_shape under skip_all_guards is an error cell (the stale graph raises on the
    doubled batch): the unsampled calls raise, the sampled one is caught and recompiles."""
    import json

    out = tmp_path / "audit.json"
    rc = audit.main(["--model", "mlp", "--policy", "skip_all_guards", "--change", "input_shape",
                     "--verify", "4", "--json", str(out), "-q"])
    assert rc == 0
    cell = json.loads(out.read_text())["models"]["mlp"][0]["changes"]["input_shape"]
    assert cell["outcome"] == "error"
    assert cell["verify"] == {"every": 4, "caught": True, "after_calls": 3, "output_ok": True}
