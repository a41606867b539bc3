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
import rank_processes

WORKER = Path(__file__).with_name("ranks_worker.py")
HARD_TIMEOUT_S = 240  # the whole run; a hang fails the test, never the suite

IN_STEP = ["flag_counts", "same", "param", "policy_name", "settings", "frames_same", "frames_differ",
           "verify_recompile", "verify_raise", "verify_warn", "verify_sampled", "verify_direct", "verify_differs",
           "dry_run_gathered", "plugin"]  # plugin: last, the plugin stays loaded on rank 1
# they leave a group out of step on rank 0 (the default group, then their own): last, on 2 ranks only
LAST_ON_2 = ["verify_missing", "missing", "after_out_of_step"]


def run_ranks(tmp_path: Path, world: int, scenarios: list[str]) -> list[dict]:
    """Runs the scenarios on ``world`` ranks; each rank's results, by rank."""
    out = tmp_path / f"out{world}"
    out.mkdir()
    env = {**os.environ, "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(tmp_path / f"store{world}"), str(out), *scenarios],
                              env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
             for rank in range(world)]
    logs = rank_processes.finish(procs, HARD_TIMEOUT_S)
    if failed := [rank for rank, proc in enumerate(procs) if proc.returncode != 0]:
        # every rank's log ends with the collectives it started: ranks out of step show where
        pytest.fail(f"rank(s) {failed} failed\n" + "\n".join(
            f"rank {rank} exited {proc.returncode}:\n{log[-2500:]}" for rank, (proc, log) in enumerate(zip(procs, logs))))
    results = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]
    for rank, result in enumerate(results):  # what each rank wrote at exit besides
        result["files"] = sorted(p.name for p in out.iterdir() if not p.name.startswith("rank"))
        if (dry := out / f"dry.rank{rank}.json").exists():
            result["dry_run_file"] = json.loads(dry.read_text())
    return results


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


def test_a_verified_calls_agreement_counts_the_ranks_that_flagged(in_step):
    world, results = in_step
    for result in results:
        assert result["flag_counts"] == {"error": None, "counts": [0, 1, world], "collectives": 3}


def test_the_same_policy_compiles_and_runs_on_every_rank(in_step):
    world, results = in_step
    for rank in range(world):
        assert results[rank]["same"] == {"error": None, "matches_eager": True, "compiles": 1, "group_size": world,
                                         "collectives": 2}  # the policy's agreement: sizes, then bytes


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
                                                "group_size": world, "collectives": 4}  # policy, frame digest


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


# -------------------------------------------------------------------- verify across ranks

SCALE_GUARD = ["self.scale"]  # torch's name of Scaled's float attribute guard (CONSTANT_MATCH)


def test_a_change_on_one_rank_under_verify_recompile_recompiles_every_rank_on_the_same_call(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["verify_recompile"]
        assert got["error"] is None
        assert got["compiles"] == [1, 1, 1, 2, 2]  # call 4 compiles on every rank, not on rank 1 alone
        assert got["matches_eager"] == [True] * 5
        assert got["violations"] == [[4, 1, SCALE_GUARD, "recompile"]]  # rank 1's, known to every rank
        assert got["agreements"] == got["verified_calls"] == 5  # one agreement per verified call
        assert got["agreement_us"] > 0


def test_a_change_under_verify_raise_raises_on_every_rank_naming_the_ranks(in_step):
    world, results = in_step
    changed = [1] if world == 2 else [1, 3]
    for rank in range(world):
        got = results[rank]["verify_raise"]
        assert got["compiles"] == [1] * 5 and got["matches_eager"] == [True, True, True, None, None]
        assert [e["call"] for e in got["errors"]] == [4, 5]  # the change stays: call 5 raises too
        for error in got["errors"]:
            assert error["ranks"] == changed
            message = error["message"]
            if world == 2:
                assert message.startswith("guardpolicy: stale cache entry of forward at ")
                assert f" at call {error['call']} on rank 1: `self.scale` (CONSTANT_MATCH), dropped by " \
                       "skip_guard_on_all_nn_modules at " in message
            else:
                lines = message.splitlines()
                assert lines[0] == "guardpolicy: stale cache entries on ranks 1, 3:"
                assert [f" on rank {r}: `self.scale` (CONSTANT_MATCH)" in line for r, line in zip(changed, lines[1:])] \
                    == [True, True]
        assert [v[:2] for v in got["violations"]] == [[call, r] for call in (4, 5) for r in changed]


def test_a_change_under_verify_warn_warns_on_every_rank_naming_the_rank(in_step):
    world, results = in_step
    last = world - 1
    for rank in range(world):
        got = results[rank]["verify_warn"]
        assert got["compiles"] == [1] * 5 and not got["errors"]
        # the cached code runs: stale on the rank that changed, right on the others
        assert got["matches_eager"] == [True, True, True] + [rank != last] * 2
        assert len(got["warned"]) == 2
        for call, warning in zip((4, 5), got["warned"]):
            assert warning.startswith("guardpolicy: dropped guard `self.scale` (CONSTANT_MATCH), dropped by ")
            assert f" failed on call {call} on rank {last} of forward at " in warning


def test_verify_agrees_on_sampled_calls_only(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["verify_sampled"]  # verify=3, rank 1 changes before call 4
        assert got["compiles"] == [1, 1, 1, 1, 1, 2, 2]  # caught at call 6, on every rank
        assert got["matches_eager"] == [True, True, True] + [rank != 1] * 2 + [True, True]
        assert got["violations"] == [[6, 1, SCALE_GUARD, "recompile"]]
        assert got["agreements"] == got["verified_calls"] == 2


def test_verify_across_ranks_on_the_direct_path_agrees_once_per_call(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["verify_direct"]  # 8 warm-up calls, the capture, direct; rank 1 changes before 11
        assert got["compiles"] == [1] * 10 + [2, 2] and got["matches_eager"] == [True] * 12
        assert got["violations"] == [[11, 1, SCALE_GUARD, "recompile"]]
        assert got["direct_calls"] == 1  # call 10 (11 went back to the normal path, 12 warms up again)
        assert got["fallbacks"] == {"verify found a dropped guard failing (on_violation recompile)": 1}
        # call 11 is verified on the direct path, then again on the normal path: agreed once
        assert got["agreements"] == 12


def test_verify_on_some_ranks_only_is_a_mismatch_of_settings_at_the_first_call(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["verify_differs"]
        assert got["error"] == "RankMismatchError" and got["ranks"] == list(range(1, world))
        assert "  settings:\n    rank 0: on_violation='recompile', verify=1\n" in got["message"]
        others = "rank 1" if world == 2 else "ranks 1, 2, 3"
        assert f"    {others}: on_violation=None, verify=0\n" in got["message"]


# -------------------------------------------------------------------- dry-run across ranks


def test_the_dry_run_report_gathers_every_ranks_events_tagged_by_rank(in_step):
    world, results = in_step
    for rank in range(world):
        got = results[rank]["dry_run_gathered"]
        assert got["error"] is None and got["ranks"] == list(range(world))
        assert got["events"] == [[1, ["self._modules['drop'].training"], "0/1"]]  # rank 1 alone ran train()
        assert got["frames"] == [[0, "0/0"], [1, "0/0"], [1, "0/1"]] + [[r, "0/0"] for r in range(2, world)]
        assert got["own"] == ([[1], 1, 2] if rank == 1 else [[rank], 0, 1])  # gather=False
        text = got["text"].splitlines()
        assert text[0].startswith(f"guardpolicy dry-run of policy `skip_guard_on_all_nn_modules` on ranks "
                                  f"{', '.join(map(str, range(world)))}: {world + 1} frame(s) compiled, 1 recompile(s)")
        assert text[-1].startswith("  ! recompile 0/1 of forward on rank 1: a dropped guard failed: the policy would "
                                   "have skipped this recompile")


def test_a_dry_run_report_path_is_written_per_rank_at_exit(in_step):
    world, results = in_step
    for rank in range(world):
        assert results[rank]["files"] == sorted(f"dry.rank{r}.json" for r in range(world))  # no dry.json
        written = results[rank]["dry_run_file"]
        assert written["ranks"] == [rank]
        assert [e["rank"] for e in written["events"]] == ([1] if rank == 1 else [])
        assert [f["rank"] for f in written["frames"]] == [rank] * (2 if rank == 1 else 1)


def test_a_rank_that_never_compiles_fails_the_others_within_rank_timeout(ranks_run):
    results = ranks_run(2)
    assert results[1]["missing"] == {"error": None, "compiles": 0, "collectives": 0}
    got = results[0]["missing"]
    assert got["error"] == "RankMismatchError"
    assert got["message"].startswith("guardpolicy: not every rank reached the agreement on the policy "
                                     "`skip_guard_on_all_nn_modules` (first compile) within 3 s")
    assert "seen from rank 0" in got["message"] and got["message"].endswith("torch: no answer within 3 s")
    assert got["ranks"] == [0]  # the rank that waited: which rank stayed away is not known to it


def test_a_rank_that_makes_fewer_verified_calls_fails_the_others_within_rank_timeout(ranks_run):
    results = ranks_run(2)
    assert results[1]["verify_missing"] == {"error": None, "calls": 2, "collectives": 4}
    got = results[0]["verify_missing"]
    assert got["error"] == "RankMismatchError" and got["raised_again"] is True  # the same error, no collective
    assert got["message"].startswith("guardpolicy: not every rank reached the agreement on verified call 3 "
                                     "within 3 s (rank_timeout), seen from rank 0: a rank did not make this "
                                     "call of the compiled object")
    assert got["calls"] == 4  # the third and fourth calls raised
    assert got["collectives"] == 5  # the policy's agreement, then verified calls 1 to 3: none for call 4


def test_a_rank_out_of_step_starts_no_collective_for_another_object(ranks_run):
    results = ranks_run(2)
    # rank 0 abandoned verified call 3's collective on the default group: another compiled
    # object's agreement there raises at once, where it would pair with that one
    got = results[0]["after_out_of_step"]
    assert got["error"] == "RankMismatchError" and got["ranks"] == [0] and got["collectives"] == 0
    assert got["message"] == ("guardpolicy: no agreement on the policy `skip_guard_on_all_nn_modules` (first "
                              "compile) started on rank 0: this process group is out of step on this rank: an "
                              "earlier guardpolicy collective on it timed out or was interrupted here, and a new "
                              "one could pair with it")
    assert results[1]["after_out_of_step"] == {"error": None, "compiles": 0, "collectives": 0}
    assert results[0]["missing"]["collectives"] == 1  # over a group of its own: it started, unanswered


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
    assert (ranks.check_frames, ranks.timeout_s, ranks.settings) == (
        True, 7.0, {"check_ranks": True, "verify": 0, "on_violation": None, "dry_run": False})
    assert repr(ranks) == "<guardpolicy.RankAgreement not resolved, check_ranks>"
