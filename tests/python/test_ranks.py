"""Many ranks (docs/distributed.md): real processes in a gloo group, 2 and 4 ranks.

Each run starts WORLD_SIZE processes of ranks_worker.py (one torch import each, several
scenarios in step) under a hard timeout: a hang kills the processes and fails the test. The
agreements with ``rank_timeout=600`` fail within that timeout only if they fail without
waiting: a difference is found when the ranks meet, not by a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import guardpolicy as gp

WORKER = Path(__file__).with_name("ranks_worker.py")
HARD_TIMEOUT_S = 240  # the whole run; a hang fails the test, never the suite

IN_STEP = ["same", "param", "policy_name", "settings", "frames_same", "frames_differ", "plugin"]
LAST_ON_2 = ["missing"]  # it leaves the group out of step: last, and on 2 ranks only


def run_ranks(tmp_path: Path, world: int, scenarios: list[str]) -> list[dict]:
    """Runs the scenarios on ``world`` ranks; each rank's results, by rank."""
    out = tmp_path / f"out{world}"
    out.mkdir()
    env = {**os.environ, "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(tmp_path / f"store{world}"), str(out), *scenarios],
                              env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
             for rank in range(world)]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=HARD_TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        pytest.fail(f"{world} ranks did not finish within {HARD_TIMEOUT_S} s (a hang)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}:\n{log[-4000:]}"
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]


@pytest.fixture(scope="module")
def ranks_run(tmp_path_factory):
    """``ranks_run(world)``: the results of one run on ``world`` ranks (each run once)."""
    runs: dict[int, list[dict]] = {}

    def get(world: int) -> list[dict]:
        if world not in runs:
            scenarios = IN_STEP + (LAST_ON_2 if world == 2 else [])
            runs[world] = run_ranks(tmp_path_factory.mktemp(f"ranks{world}"), world, scenarios)
        return runs[world]

    return get


@pytest.fixture(params=[2, 4], ids=["2ranks", "4ranks"])
def in_step(request, ranks_run) -> tuple[int, list[dict]]:
    return request.param, ranks_run(request.param)


def test_the_same_policy_compiles_and_runs_on_every_rank(in_step):
    world, results = in_step
    for rank in range(world):
        assert results[rank]["same"] == {"error": None, "matches_eager": True, "compiles": 1, "group_size": world}


def test_a_parameter_differing_on_one_rank_fails_on_every_rank_naming_it(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["param"]
        assert got["error"] == "RankMismatchError"
        assert got["ranks"] == [1]
        message = got["message"]
        assert message.startswith("guardpolicy: the ranks do not use the same policy; rank 1 differs from rank 0:\n"
                                  "  params:\n")
        others = ", ".join(str(r) for r in range(world) if r != 1)
        assert f"    rank{'s' if world > 2 else ''} {others}: {{keep_parameters=False}}" in message
        assert "    rank 1: {keep_parameters=True}" in message
        assert "  file: " in message and "keep_tensor_guards.gpol" in message
        assert "not every rank reached" not in message  # found when the ranks met, no timeout


def test_another_policy_on_the_last_rank_is_named(in_step):
    world, results = in_step
    last = world - 1
    for rank in range(world):
        got = results[rank]["policy_name"]
        assert got["error"] == "RankMismatchError" and got["ranks"] == [last]
        assert f"    rank {last}: `skip_guard_on_globals`" in got["message"]
        assert "`skip_guard_on_all_nn_modules`" in got["message"]


def test_check_ranks_on_some_ranks_only_is_a_mismatch_of_settings(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["settings"]
        assert got["error"] == "RankMismatchError"
        assert got["ranks"] == list(range(1, world))
        assert "  settings:\n    rank 0: check_ranks=True\n" in got["message"]
        assert f"    {'rank 1' if world == 2 else 'ranks 1, 2, 3'}: check_ranks=False\n" in got["message"]


def test_check_ranks_with_equal_decisions_runs(in_step):
    world, results = in_step
    for rank in range(world):
        assert results[rank]["frames_same"] == {"error": None, "matches_eager": True, "compiles": 1,
                                                "group_size": world}


def test_check_ranks_names_the_frame_and_the_first_differing_guard(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["frames_differ"]
        assert got["error"] == "RankMismatchError" and got["ranks"] == [1]
        message = got["message"]
        assert "decided the guards of a compiled frame differently" in message
        assert f"  rank 1: scaled at {WORKER}:" in message
        assert "  first difference between rank 0 and rank 1, guard 7:\n" in message
        # rank 1 reads the global SCALE, which the others do not: its guard 7 is on SCALE where
        # rank 0's is on USE_SCALE (torch's order); skip_guard_on_globals drops both
        assert "    rank 0: drop CONSTANT_MATCH `G['USE_SCALE']` (skip_guard_on_globals at " in message
        assert "    rank 1: drop CONSTANT_MATCH `G['SCALE']` (skip_guard_on_globals at " in message


def test_a_plugin_loaded_on_one_rank_only_is_named(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["plugin"]
        assert got["error"] == "RankMismatchError" and got["ranks"] == [1]
        others = "rank 0" if world == 2 else "ranks 0, 2, 3"
        assert f"  plugins:\n    {others}: none\n" in got["message"]
        assert "    rank 1: names 1.0.0 (sha256 " in got["message"]


def test_a_rank_that_never_compiles_fails_the_others_within_rank_timeout(ranks_run):
    results = ranks_run(2)
    assert results[1]["missing"] == {"error": None, "compiles": 0}
    got = results[0]["missing"]
    assert got["error"] == "RankMismatchError"
    assert got["message"].startswith("guardpolicy: not every rank reached the agreement on the policy "
                                     "`skip_guard_on_all_nn_modules` (first compile) within 3 s")
    assert "Ranks 1 failed to pass monitoredBarrier" in got["message"]  # gloo's words, from rank 0


# -------------------------------------------------------------------- in one process


def test_one_process_without_torch_distributed_agrees_on_nothing():
    model = torch.nn.Linear(4, 2)
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", check_ranks=True)
    opt(torch.randn(2, 4))
    assert gp.stats(opt).ranks.group is None
    assert repr(gp.stats(opt).ranks) == "<guardpolicy.RankAgreement no group, check_ranks>"


def test_bad_rank_arguments_are_refused():
    model = torch.nn.Linear(4, 2)
    policy = gp.load_std("skip_guard_on_all_nn_modules")
    with pytest.raises(ValueError, match=r"process_group= needs torch.distributed initialised"):
        gp.compile(model, policy, backend="eager", process_group=object())
    with pytest.raises(TypeError, match="check_ranks must be a bool, not int"):
        gp.compile(model, policy, backend="eager", check_ranks=1)
    for bad in (0, -1.0, "5", True):
        with pytest.raises(TypeError, match="rank_timeout must be a positive number of seconds"):
            gp.compile(model, policy, backend="eager", rank_timeout=bad)


def test_a_pickled_object_keeps_check_ranks_and_agrees_again():
    import pickle

    model = torch.nn.Linear(4, 2)
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", check_ranks=True,
                     rank_timeout=7)
    opt(torch.randn(2, 4))
    copy = pickle.loads(pickle.dumps(opt))
    ranks = gp.stats(copy).ranks
    assert (ranks.check_frames, ranks.timeout_s, ranks.settings) == (True, 7.0, {"check_ranks": True})
    assert repr(ranks) == "<guardpolicy.RankAgreement not resolved, check_ranks>"
