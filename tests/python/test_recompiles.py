"""``python -m guardpolicy recompiles`` and ``gp.recompiles``: on each storm of
tests/python/storms/ (an options dict per call, per-batch module ints with a step counter, a
counter alone, a float the graph specializes on, a list the output grows with, a PEFT adapter
loaded per request) the storming guard is named first with the right verdict, and where a fix
is written the loop runs with it in at most 3 compiles, no eager fallback and every output and
written state equal to eager's. Backend eager: guards and recompiles do not depend on it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools.common.model_spec import import_file
from guardpolicy.tools.recompiles.command import recompiles

STORMS = os.path.join(os.path.dirname(__file__), "storms")


def _storm(name: str):
    module = import_file(os.path.join(STORMS, f"{name}.py"))

    def build():
        from guardpolicy.tools.common.model_spec import BuiltModel

        model, args = module.build()
        return BuiltModel(model, tuple(args), {})

    return build, module.run


@pytest.mark.parametrize("storm, guard, verdict, line", [
    ("options_dict", "options['request_id']", "drop",
     """drop when name == "options['request_id']" and guard_type == CONSTANT_MATCH"""),
    ("batch_ints", "self.steps", "config", "config allow_unspec_int_on_nn_module = true"),
    ("counter", "self.step", "config", "config allow_unspec_int_on_nn_module = true"),
])
def test_a_storm_with_a_fix_is_fixed_and_proven(storm, guard, verdict, line):
    report = recompiles(*_storm(storm))
    first = report.storms[0]
    assert (first.guard, first.verdict, first.line) == (guard, verdict, line)
    assert first.failures == 36 and first.recompiles == 8  # 1 + 2 + ... + 8 cache entries tried
    assert report.before.compiles == 8 and report.before.eager_fallback
    assert report.after.compiles <= 3 and not report.after.eager_fallback
    assert (report.after.wrong, report.after.wrong_state) == (0, 0)
    assert report.proven and not report.unfixed
    assert "extends watch_state" in report.policy and line in report.policy


def test_a_check_no_call_fails_is_kept_its_drop_would_skip_the_check():
    """`if len(options["request_id"]) > 64: raise`: no call of the loop fails it, but the audit
    tries a long id, eager raises, and the compiled code with the guard dropped would not."""
    report = recompiles(*_storm("validation"))
    first = report.storms[0]
    assert (first.guard, first.verdict, first.line) == ("options['request_id']", "keep", "")
    assert "eager raised ValueError: request id too long" in first.advice
    assert report.after is None and not report.proven


def test_a_counter_s_drop_is_never_proposed():
    """The audit calls dropping `self.step` (incremented by the forward) dangerous: the
    compiled code would write back the value it traced, so the fix is the config line."""
    report = recompiles(*_storm("counter"))
    assert all(not s.line.startswith("drop") for s in report.storms)


def test_a_float_the_graph_specializes_on_is_a_tensor_storm():
    report = recompiles(*_storm("float_attrs"))
    first = report.storms[0]
    assert (first.guard, first.guard_type, first.verdict, first.line) == ("self.scale", "SHAPE_ENV", "tensor", "")
    assert "register_buffer('scale', torch.tensor(v))" in first.advice
    assert report.after is None and report.unfixed == [first]


def test_a_growing_list_the_output_reads_is_kept():
    report = recompiles(*_storm("growing_list"))
    first = report.storms[0]
    assert (first.guard, first.guard_type, first.verdict) == ("self.seen", "SEQUENCE_LENGTH", "keep")
    assert "dangerous" in first.advice and report.after is None


def test_an_adapter_loaded_per_request_is_structure_with_peft_s_hotswap():
    pytest.importorskip("peft")
    report = recompiles(*_storm("lora_per_request"))
    first = report.storms[0]
    assert (first.guard, first.verdict) == ("self.base_model.peft_config", "structure")
    assert "prepare_model_for_compiled_hotswap" in first.advice and "'req1'" in first.values
    assert report.after is None


def test_gp_recompiles_names_the_storm_of_a_live_object():
    build, run = _storm("counter")
    model = build().fn
    compiled = gp.compile(model, "watch_state", backend="eager")
    with torch.no_grad():
        for _ in range(10):
            compiled(torch.randn(2, 8))
    report = gp.recompiles(compiled)
    assert [(s.guard, s.guard_type, s.verdict) for s in report.storms] == [("self.step", "EQUALS_MATCH", "config")]
    assert report.before.compiles == 8 and report.before.eager_fallback
    assert [r.entry for r in report.recompiles[:3]] == ["0/0", "0/1", "0/0"]
    assert "self.step" in report.table()


def test_the_eager_fallback_warning_names_the_guard_that_failed_most(caplog):
    build, _ = _storm("options_dict")
    model = build().fn
    compiled = gp.compile(model, "watch_state", backend="eager")
    with caplog.at_level(logging.WARNING, logger="guardpolicy"), torch.no_grad():
        for i in range(10):
            compiled(torch.randn(2, 8), {"request_id": f"r{i}", "scale": None})
    fallback = gp.stats(compiled).eager_fallbacks[0]
    assert fallback.most_failed == "options['request_id'] (CONSTANT_MATCH) failed 36 times"
    assert "most often: options['request_id'] (CONSTANT_MATCH) failed 36 times" in caplog.text


def _cli(*args: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guardpolicy", "recompiles", "-q", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_command_writes_a_proven_fix_and_its_json(tmp_path):
    script = os.path.join(STORMS, "options_dict.py")
    done = _cli("--model", script, "--run", script, "-o", "fix.gpol", "--json", "r.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "proven: outputs and state equal eager's on every call, the storms its lines fix gone; wrote fix.gpol" \
        in done.stdout
    assert "verify every 100 calls" in (tmp_path / "fix.gpol").read_text()  # the default, as suggest's
    gp.load(str(tmp_path / "fix.gpol"))  # a policy that loads
    data = json.loads((tmp_path / "r.json").read_text())
    assert [(s["guard"], s["verdict"], s["failures"]) for s in data["storms"]] == [
        ("options['request_id']", "drop", 36)]
    assert set(data["storms"][0]) >= {"guard", "guard_type", "frame", "failures", "values", "verdict", "line",
                                      "advice"}
    assert data["before"]["compiles"] == 8 and data["before"]["eager_fallback"] is True
    assert data["after"] == {**data["after"], "compiles": 1, "eager_fallback": False, "wrong": 0, "wrong_state": 0}


def test_the_command_exits_1_on_a_storm_no_policy_fixes_and_2_on_bad_input(tmp_path):
    script = os.path.join(STORMS, "float_attrs.py")
    done = _cli("--model", script, "--run", script, "-o", "fix.gpol", cwd=tmp_path)
    assert done.returncode == 1 and "tensor" in done.stdout and not (tmp_path / "fix.gpol").exists()
    (tmp_path / "norun.py").write_text("x = 1\n")
    done = _cli("--model", script, "--run", "norun.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == ("python -m guardpolicy recompiles: error: --run: norun.py: defines no function "
                                   "`run(compiled, model)`")
    done = _cli("--model", script, "--run", script, "-o", "same.out", "--json", "same.out", cwd=tmp_path)
    assert done.returncode == 2 and "-o and --json name the same file" in done.stderr
    done = _cli("--model", script, "--run", script, "-o", "no/such/fix.gpol", cwd=tmp_path)
    assert done.returncode == 2 and "no folder" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "fix.gpol").write_text("keep me\n")
    done = _cli("--model", script, "--run", script, "-o", "fix.gpol", cwd=tmp_path)
    assert done.returncode == 2 and (tmp_path / "fix.gpol").read_text() == "keep me\n"


def test_the_structure_advice_holds_peft_s_hotswap_compiles_once_under_watch_state():
    """What the `structure` verdict recommends: PEFT's hotswap swaps each request's adapter
    weights in place, and `watch_state` serves them with one compile, as torch.compile does."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from peft.utils.hotswap import hotswap_adapter_from_state_dict, prepare_model_for_compiled_hotswap

    def lora_model():
        base = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
        return get_peft_model(base, LoraConfig(r=4, target_modules=["0", "2"], init_lora_weights=False)).eval()

    torch.manual_seed(0)
    model = lora_model()
    requests = [{k: v for k, v in lora_model().state_dict().items() if "lora_" in k} for _ in range(4)]
    prepare_model_for_compiled_hotswap(model, target_rank=4)
    compiled = gp.compile(model, "watch_state", backend="eager")
    x = torch.randn(2, 8)
    with torch.no_grad():
        for state_dict in requests:
            hotswap_adapter_from_state_dict(model, state_dict, "default", model.peft_config["default"])
            torch.testing.assert_close(compiled(x), model(x))
    assert gp.stats(compiled).compiles == 1 and not gp.stats(compiled).recompiles


def test_an_int_counter_on_a_submodule_is_config_not_structure():
    """The guard reads `self._modules['1'].step`: a module's dict on the way is no change of
    the module tree; torch's HINT names the knob, and the counter keeps counting under it."""
    from guardpolicy.tools.common.model_spec import BuiltModel

    counted = import_file(os.path.join(STORMS, "counter.py")).Counted  # `self.step += 1`

    def build():
        return BuiltModel(torch.nn.Sequential(torch.nn.Linear(8, 8), counted()).eval(), (torch.randn(2, 8),), {})

    def run(compiled, model):
        x = torch.randn(2, 8)
        for _ in range(12):
            compiled(x)

    report = recompiles(build, run)
    first = report.storms[0]
    assert (first.verdict, first.line) == ("config", "config allow_unspec_int_on_nn_module = true"), first
    assert report.proven and report.after.compiles <= 3 and report.after.wrong_state == 0
