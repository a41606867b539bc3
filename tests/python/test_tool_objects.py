"""A guardpolicy tool's own compiled objects do not speak to the user (``runtime.logs.tool_objects``):
the demo audited torch's recipe (a policy with a stance line) and logged three times
"guardpolicy: call 10 of 'p_torch_s_recipe' after warm-up matched no cache entry of forward at
.../tools/mutation/plan.py:73 ...", the internal names of its own objects. Objects made inside
``tool_objects()`` recover silently; the user's own objects log as ever, even when called there.
Real compiles throughout (eager backend)."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

import torch

import guardpolicy as gp
from guardpolicy.runtime.logs import making_tool_objects, tool_objects
from guardpolicy.tools import latency

ROOT = Path(__file__).resolve().parents[2]
SERVING = ROOT / "policies" / "examples" / "serving.gpol"  # stance skip_guard_eval_unsafe after 8 calls
BLOCKS = Path(__file__).resolve().parent / "models" / "blocks_model.py"
RECOVERY = "after warm-up matched no cache entry"
#: the demo's own recipe, audited by it (policy `p_torch_s_recipe`)
RECIPE = latency.Recipe("torch's recipe", "skip_guard_on_all_nn_modules", ift=True, stance=True)


def _step(x):
    return torch.relu(x) * 2 + 1


def step():
    """A function with a code object of its own, so its own Dynamo cache (two compiled
    modules would share ``Module._call_impl``'s, and SERVING drops the guards that tell them apart)."""
    return latency.own_copy(_step)


def recover_once(opt) -> None:
    """Warm-up past the stance line's 8 calls, then a dtype warm-up never showed (not a new
    batch size: once one object's frame recompiled for one, Dynamo marks it dynamic for every
    copy of the same function)."""
    for _ in range(10):
        opt(torch.randn(8, 4))
    opt(torch.randn(8, 4, dtype=torch.float64))
    assert gp.stats(opt).recoveries == 1


def recovery_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "guardpolicy" and RECOVERY in r.getMessage()]


def test_a_tool_object_recovers_silently_and_a_users_object_still_logs_inside_the_scope(caplog):
    assert not making_tool_objects()
    users = gp.compile(step(), SERVING, backend="eager")
    with tool_objects():
        assert making_tool_objects()
        tools = gp.compile(step(), SERVING, backend="eager")
    assert not making_tool_objects()
    assert gp.stats(tools).tool_object and not gp.stats(users).tool_object
    with caplog.at_level(logging.WARNING, logger="guardpolicy"):
        recover_once(tools)
        assert recovery_lines(caplog) == []
        with tool_objects():  # the user's object speaks wherever it is called
            recover_once(users)
    assert len(recovery_lines(caplog)) == 1 and "of 'serving'" in recovery_lines(caplog)[0]


def test_on_recompile_warn_does_not_warn_for_a_tool_object():
    policy = gp.load(SERVING.read_text().replace("after 8 calls\n", "after 8 calls\n  on_recompile warn\n"))
    assert policy.on_recompile == "warn"
    with tool_objects():
        tools = gp.compile(step(), policy, backend="eager")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        recover_once(tools)
    assert not [w for w in seen if issubclass(w.category, gp.StanceRecompileWarning)]


def test_the_timing_and_bench_compiles_are_tool_objects():
    from guardpolicy.tools.bench import rows

    policy = gp.load(RECIPE.policy_source())
    model = torch.nn.Linear(4, 2)
    assert gp.stats(latency.gp_compile(model, policy, backend="eager")).tool_object
    assert gp.stats(rows._gp_compile(model, "eager:1", policy)).tool_object
    assert not gp.stats(gp.compile(model, policy, backend="eager")).tool_object


def test_the_demo_runs_inside_the_scope(monkeypatch):
    from guardpolicy.tools import demo

    seen = []
    monkeypatch.setattr(demo, "_run", lambda *a: seen.append(making_tool_objects()) or 0)
    assert demo.main(["--models", "mlp"]) == 0 and seen == [True]


def test_the_audit_of_torchs_recipe_in_the_scope_logs_no_recovery(caplog):
    """The demo's case on a real model: the mutation audit of the recipe recovers (its changes
    miss the cache after warm-up) and, in the scope, says nothing; outside it, it did."""
    from guardpolicy.tools.common import model_spec
    from guardpolicy.tools.mutation import run as mutation

    built = model_spec.resolve(str(BLOCKS)).build()
    policy = gp.load(RECIPE.policy_source())
    with caplog.at_level(logging.WARNING, logger="guardpolicy"):
        mutation.audit(built.fn, built.args, None, policy, label="blocks")
        before = recovery_lines(caplog)
        caplog.clear()
        with tool_objects():
            result = mutation.audit(built.fn, built.args, None, policy, label="blocks")
    assert before and "'p_torch_s_recipe'" in before[0]  # what the demo printed
    assert recovery_lines(caplog) == [] and result.groups


def test_the_audit_command_prints_no_recovery_line(tmp_path):
    recipe = tmp_path / "recipe.gpol"
    recipe.write_text(RECIPE.policy_source())
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "audit", "--model", str(BLOCKS), "--policy",
                        str(recipe)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "p_torch_s_recipe" in r.stdout  # the audit ran the recipe
    assert RECOVERY not in r.stdout + r.stderr, r.stderr
