"""One rank of the many-rank tests (test_ranks.py starts WORLD_SIZE of these, each a real
process in a gloo group initialised through a file store; nothing is shared but the file).

    python ranks_worker.py STORE OUT_DIR SCENARIO [SCENARIO ...]
    (environment: RANK, WORLD_SIZE)

Each scenario builds a fresh compiled object, runs it and records what happened as JSON in
OUT_DIR/rank<RANK>.json: {scenario: {"error": type name or None, "message", "ranks",
"matches_eager", "compiles", ...}}. Scenarios run in the order given, all ranks in step.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import guardpolicy as gp

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
USE_SCALE = RANK == 1  # read by `scaled`: rank 1 compiles a guard on SCALE, the others do not
SCALE = 3.0


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def scaled(x):
    if USE_SCALE:
        return x * SCALE
    return x + 1


def run_model(opt, model, calls: int = 3) -> dict:
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outs = [opt(x) for _ in range(calls)]
        want = model(x)
    return {"matches_eager": all(torch.equal(o, want) for o in outs), "compiles": gp.stats(opt).compiles}


def same(**kw) -> dict:
    model = mlp()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", **kw)
    result = run_model(opt, model)
    group = gp.stats(opt).ranks.group
    result["group_size"] = group.size if group else 0
    return result


def param() -> dict:
    model = mlp()
    policy = gp.load_std("keep_tensor_guards", keep_parameters=RANK == 1)
    return run_model(gp.compile(model, policy, backend="eager", rank_timeout=600), model)


def policy_name() -> dict:
    model = mlp()
    name = "skip_guard_on_globals" if RANK == WORLD - 1 else "skip_guard_on_all_nn_modules"
    return run_model(gp.compile(model, gp.load_std(name), backend="eager", rank_timeout=600), model)


def settings() -> dict:
    model = mlp()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager",
                     check_ranks=RANK == 0, rank_timeout=600)
    return run_model(opt, model)


def frames_same() -> dict:
    return same(check_ranks=True)


def frames_differ() -> dict:
    opt = gp.compile(scaled, gp.load_std("skip_guard_on_globals"), backend="eager", check_ranks=True,
                     rank_timeout=600)
    x = torch.ones(2)
    out = opt(x)
    return {"matches_eager": torch.equal(out, scaled(x)), "compiles": gp.stats(opt).compiles}


def plugin() -> dict:
    if RANK == 1:
        gp.load_plugin(gp.example_plugin_path("names"))
    model = mlp()
    return run_model(gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager",
                                rank_timeout=600), model)


def missing() -> dict:
    """Rank 1 never calls its compiled object: the others' first compile waits 3 s at most."""
    model = mlp()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", rank_timeout=3)
    if RANK == 1:
        time.sleep(6)  # alive, but elsewhere (a rank that exits at once fails the others sooner)
        return {"compiles": 0}
    return run_model(opt, model)


SCENARIOS = {f.__name__: f for f in (same, param, policy_name, settings, frames_same, frames_differ,
                                     plugin, missing)}


def main() -> None:
    store, out_dir, *names = sys.argv[1:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=WORLD)
    results = {}
    for name in names:
        torch._dynamo.reset()
        try:
            results[name] = {"error": None, **SCENARIOS[name]()}
        except gp.RankMismatchError as e:
            results[name] = {"error": type(e).__name__, "message": str(e), "ranks": list(e.ranks)}
        except Exception as e:  # recorded, so the test shows it
            results[name] = {"error": type(e).__name__, "message": traceback.format_exc()}
        with open(os.path.join(out_dir, f"rank{RANK}.json"), "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
