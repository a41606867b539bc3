"""Ranks never hang (docs/distributed.md): the uneven-ranks program, real gloo processes.

One rank sees a batch of 5 instead of 8 on call 4 and recompiles alone, under
``check_ranks=True``, with and without verify, on 2 and 4 ranks, with rank 0, rank 1 and the
last rank in turn the odd one (``uneven_ranks_worker.py``). Every rank ends each scenario
within ``rank_timeout`` + 10 s, with ``RankMismatchError`` or having made every call (each
output equal to eager's); the odd rank's error names it and the frame it compiled alone (and
the call, when calls are counted: with verify). A rank waiting in a collective ends within
5 s of SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rank_processes
import sigint

WORKER = Path(__file__).with_name("uneven_ranks_worker.py")
#: Real processes, ~2 minutes: `make test` runs them (on torch 2.13); the portability legs run
#: test_ranks.py's many-rank tests instead.
pytestmark = pytest.mark.soak

TIMEOUT_S = 6  # rank_timeout: the first compiles of 4 ranks on 2 cores finish some seconds apart
HARD_TIMEOUT_S = 180  # the whole run; a hang fails the test, never the suite


def start(tmp_path: Path, world: int, timeout: float, specs: list[str],
          hold_until: Path | None = None) -> list[subprocess.Popen]:
    env = {**os.environ, "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}
    if hold_until is not None:
        env["HOLD_UNTIL"] = str(hold_until)
    return [sigint.popen([sys.executable, "-u", str(WORKER), str(tmp_path / "store"), str(tmp_path), str(timeout),
                          *specs], env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
            for rank in range(world)]


def finish(procs: list[subprocess.Popen]) -> list[str]:
    return rank_processes.finish(procs, HARD_TIMEOUT_S)


def specs_for(world: int) -> list[str]:
    odd_ranks = sorted({0, 1, world - 1})
    return [f"{odd}:{verify}" for verify in (0, 2) for odd in odd_ranks]


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def uneven(request, tmp_path_factory) -> tuple[int, list[dict]]:
    world = request.param
    tmp = tmp_path_factory.mktemp(f"uneven{world}")
    procs = start(tmp, world, TIMEOUT_S, specs_for(world))
    logs = finish(procs)
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}:\n{log[-4000:]}"
    return world, [json.loads((tmp / f"rank{rank}.json").read_text()) for rank in range(world)]


def test_every_rank_ends_each_scenario_within_rank_timeout_plus_10_s(uneven):
    world, results = uneven
    for rank, result in enumerate(results):
        assert set(result) == set(specs_for(world))
        for spec, r in result.items():
            assert r["seconds"] < TIMEOUT_S + 10, (rank, spec, r)
            assert r["error"] in (None, "RankMismatchError"), (rank, spec, r)
            if r["error"] is None:
                assert r["calls"] == 6 and r["matches_eager"], (rank, spec, r)


def test_the_odd_rank_raises_naming_itself_and_the_frame_it_compiled_alone(uneven):
    world, results = uneven
    for spec in specs_for(world):
        odd, verify = (int(v) for v in spec.split(":"))
        r = results[odd][spec]
        assert r["error"] == "RankMismatchError" and r["ranks"] == [odd], (spec, r)
        assert f"seen from rank {odd}" in r["message"] and "[0/1]" in r["message"]
        assert "a recompile on some ranks only" in r["message"]
        if verify:
            assert f"on call 4 within {TIMEOUT_S} s (rank_timeout)" in r["message"]


def test_without_verify_the_other_ranks_finish_and_with_verify_they_raise_at_the_next_verified_call(uneven):
    world, results = uneven
    for spec in specs_for(world):
        odd, verify = (int(v) for v in spec.split(":"))
        others = [results[rank][spec] for rank in range(world) if rank != odd]
        if not verify:
            assert all(r["error"] is None for r in others), (spec, others)
        else:  # the odd rank never comes to verified call 6
            assert all(r["error"] == "RankMismatchError" and "verified call 6" in r["message"] for r in others), \
                (spec, others)


def test_sigint_ends_a_rank_waiting_in_a_collective_within_5_s(tmp_path):
    # Rank 0 makes its 6 calls and then stays in the group until released: were it to exit,
    # the odd rank's collective would end on the closed connection before the signal came.
    release = tmp_path / "release"
    procs = start(tmp_path, 2, 120, ["1:0"], hold_until=release)
    odd = procs[1]
    try:
        for line in odd.stdout:
            if line.startswith("ODD CALL"):
                break
        time.sleep(1.5)  # now in the agreement on the frame it compiled alone (rank_timeout 120 s)
        assert odd.poll() is None
        sent = time.monotonic()
        odd.send_signal(signal.SIGINT)
        odd.wait(timeout=30)
        assert time.monotonic() - sent < 5
        assert odd.returncode != 0
    finally:
        release.touch()
        finish(procs)
    assert procs[0].returncode == 0
