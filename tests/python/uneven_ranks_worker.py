"""One rank of the uneven-ranks program (test_uneven_ranks.py starts WORLD_SIZE of these in a
gloo group initialised through a file store):

    python uneven_ranks_worker.py STORE OUT_DIR TIMEOUT ODD:VERIFY [ODD:VERIFY ...]
    (environment: RANK, WORLD_SIZE)

Per scenario ``ODD:VERIFY`` a compiled MLP (``check_ranks=True``, ``rank_timeout=TIMEOUT``,
``verify=VERIFY``, 0: off) is called 6 times with a batch of 8, except that rank ``ODD`` sees
a batch of 5 on call 4: it recompiles alone. Each scenario has its own process group (made
before the first, while every rank is in step), so an abandoned collective stays in it; the
ranks meet at a barrier of the default group between two scenarios. Each rank writes
OUT_DIR/rank<RANK>.json: per scenario the error (type, message), the calls made, whether
every output equalled eager, and the seconds the scenario took. Before the odd call the odd
rank prints ``ODD CALL`` (the SIGINT test waits for it). With ``HOLD_UNTIL=PATH`` in the
environment, a rank that made all its calls stays in the group until PATH exists (at most
60 s): the odd rank's peers are alive while it waits in a collective, so that collective does
not fail on a closed connection first.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import guardpolicy as gp
from guardpolicy.tools.common.compare import compare

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
ODD_CALL = 4
CALLS = 6


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def scenario(odd: int, verify: int, timeout: float, group) -> dict:
    model = mlp()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", check_ranks=True,
                     rank_timeout=timeout, process_group=group, verify=verify)
    calls, same = 0, True
    with torch.no_grad():
        for call in range(1, CALLS + 1):
            batch = 5 if (RANK == odd and call == ODD_CALL) else 8
            if batch == 5:
                print("ODD CALL", flush=True)
            x = torch.randn(batch, 4, generator=torch.Generator().manual_seed(call))
            same = same and compare(opt(x), model(x)) is None
            calls = call
    return {"calls": calls, "matches_eager": same}


def main() -> None:
    store, out_dir, timeout, *specs = sys.argv[1:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=WORLD)
    groups = [dist.new_group(list(range(WORLD))) for _ in specs]
    results = {}
    for spec, group in zip(specs, groups):
        odd, verify = (int(v) for v in spec.split(":"))
        torch.compiler.reset()
        start = time.monotonic()
        try:
            results[spec] = {"error": None, **scenario(odd, verify, float(timeout), group)}
        except gp.RankMismatchError as e:
            results[spec] = {"error": type(e).__name__, "message": str(e), "ranks": list(e.ranks)}
        except Exception as e:  # recorded, so the test shows it
            results[spec] = {"error": type(e).__name__, "message": str(e)}
        results[spec]["seconds"] = time.monotonic() - start
        with open(os.path.join(out_dir, f"rank{RANK}.json"), "w") as f:
            json.dump(results, f, indent=1)
        if spec != specs[-1]:
            dist.barrier()  # the default group: guardpolicy never used it, so it is in step
    hold_until(os.environ.get("HOLD_UNTIL"))
    dist.destroy_process_group()


def hold_until(path: str | None, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
