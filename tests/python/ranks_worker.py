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
import warnings

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
    """Rank 1 never calls its compiled object: the others' first compile waits 3 s at most.
    Over a group of its own: the default group is out of step on rank 0 (verify_missing)."""
    model = mlp()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", rank_timeout=3,
                     process_group=OWN_GROUP)
    if RANK == 1:
        time.sleep(6)  # alive, but elsewhere (a rank that exits at once fails the others sooner)
        return {"compiles": 0}
    return run_model(opt, model)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
        self.scale = 1.0

    def forward(self, x):
        return self.fc(x) * self.scale


def verified(on_violation: str, changing: set[int], calls: int = 5, change_at: int = 4, **kw) -> dict:
    """Calls a ``Scaled`` compiled with verify; before call ``change_at`` the ranks in
    ``changing`` (only they) set ``scale``, a guard skip_guard_on_all_nn_modules drops."""
    torch.manual_seed(0)
    model = Scaled()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager",
                     on_violation=on_violation, rank_timeout=600, **{"verify": 1, **kw})
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    compiles, matches, errors, warned = [], [], [], []
    with torch.no_grad():
        for call in range(1, calls + 1):
            if call == change_at and RANK in changing:
                model.scale = 2.0
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", gp.StaleGuardWarning)
                try:
                    matches.append(torch.equal(opt(x), model(x)))
                except gp.StaleGuardError as e:
                    errors.append({"call": call, "message": str(e), "ranks": list(e.ranks)})
                    matches.append(None)
            warned += [str(w.message) for w in seen if issubclass(w.category, gp.StaleGuardWarning)]
            compiles.append(gp.stats(opt).compiles)
    st = gp.stats(opt)
    dispatch = st.dispatch
    return {"compiles": compiles, "matches_eager": matches, "errors": errors, "warned": warned,
            "fallbacks": dict(dispatch.fallbacks) if dispatch is not None else None,
            "violations": [[v.call, v.rank, [g.name for g in v.guards], v.action] for v in st.violations],
            "verified_calls": st.verified_calls, "agreements": st.ranks.verify_agreements,
            "agreement_us": st.ranks.verify_agreement_us,
            "direct_calls": dispatch.direct_calls if dispatch is not None else None}


def verify_recompile() -> dict:
    return verified("recompile", {1})


def verify_raise() -> dict:
    return verified("raise", {1} if WORLD == 2 else {1, 3})


def verify_warn() -> dict:
    return verified("warn", {WORLD - 1})


def verify_sampled() -> dict:
    """verify=3: the change before call 4 (rank 1) is caught at call 6, on every rank."""
    return verified("recompile", {1}, calls=7, verify=3)


def verify_direct() -> dict:
    """Direct dispatch: 8 warm-up calls, the capture, direct calls; rank 1 changes before call 11."""
    return verified("recompile", {1}, calls=12, change_at=11, dispatch="direct")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(1.0)

    def forward(self, x):
        return self.fc(x) + self.drop(torch.ones_like(x))


def dry_run_gathered() -> dict:
    """A dry-run whose rank 1 alone goes through train(): a recompile there only; then every
    rank asks for the report (gathered), and for its own (not gathered). The report of each
    rank is written at exit to OUT_DIR/dry.rank<RANK>.json."""
    torch.manual_seed(0)
    model = Block().eval()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager",
                     dry_run=os.path.join(OUT_DIR, "dry.json"), rank_timeout=600)
    x = torch.ones(2, 4)
    with torch.no_grad():
        opt(x)
        if RANK == 1:
            model.train()
            opt(x)
            model.eval()
        opt(x)
    report, own = gp.dry_run_report(opt), gp.dry_run_report(opt, gather=False)
    return {"ranks": list(report.ranks), "text": report.to_text(),
            "events": [[e.rank, [g.name for g in e.guards], e.recompile.compile_id] for e in report.events],
            "frames": [[f["rank"], f["frame"]["compile_id"]] for f in report.frames],
            "own": [list(own.ranks), len(own.events), len(own.frames)]}


def verify_missing() -> dict:
    """Rank 1 makes one call fewer: rank 0's third verified call waits 3 s at most; the next
    call raises the same error again, with no collective. (Every rank loads the plugin that
    `plugin` left loaded on rank 1, so that the policies agree.)"""
    if "names" not in {p.name for p in gp.api.registry.plugins()}:
        gp.load_plugin(gp.example_plugin_path("names"))
    torch.manual_seed(0)
    model = Scaled()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", verify=1,
                     rank_timeout=3)
    x = torch.ones(2, 4)
    with torch.no_grad():
        try:
            for _ in range(3 if RANK == 0 else 2):
                opt(x)
        except gp.RankMismatchError as e:
            try:
                opt(x)
            except gp.RankMismatchError as again:
                return {"error": type(e).__name__, "message": str(e), "raised_again": again is e,
                        "calls": gp.stats(opt).calls}
    if RANK == 1:
        time.sleep(6)  # alive, but elsewhere
    return {"error": None, "calls": gp.stats(opt).calls}


def after_out_of_step() -> dict:
    """After verify_missing, another object on the default group: rank 0 abandoned a
    collective there, so its first compile raises at once, starting no collective (rank 1
    does not call it)."""
    if RANK == 1:
        return {"compiles": 0}
    model = mlp()
    return run_model(gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager",
                                rank_timeout=600), model)


def verify_differs() -> dict:
    """verify on rank 0 only: its first call is verified before it compiles."""
    return verified("recompile", set(), calls=2, verify=1 if RANK == 0 else 0)


def flag_counts() -> dict:
    """``RankGroup.flagged`` with no rank, the last rank and every rank flagging."""
    from guardpolicy.distributed.agreement import RankGroup

    group = RankGroup(None, 30.0)
    return {"counts": [group.flagged(False), group.flagged(RANK == WORLD - 1), group.flagged(True)]}


SCENARIOS = {f.__name__: f for f in (flag_counts, same, param, policy_name, settings, frames_same, frames_differ,
                                     plugin, verify_recompile, verify_raise, verify_warn, verify_sampled,
                                     verify_direct, verify_differs, dry_run_gathered, missing, verify_missing,
                                     after_out_of_step)}
OUT_DIR = ""
SCENARIO = ""  # the scenario running, for the collective trace
STARTED: dict[str, int] = {}  # the collectives each scenario started
OWN_GROUP = None  # a group of every rank besides the default one (made while in step)


def trace_collectives() -> None:
    """Prints each collective this rank starts (scenario, kind, bytes per rank) to stderr, so
    that a run whose ranks fell out of step shows each rank's sequence in the test's log."""
    for kind in ("all_gather", "all_reduce"):
        start = getattr(dist, kind)

        def traced(*args, _start=start, _kind=kind, **kw):
            tensor = args[1] if _kind == "all_gather" else args[0]
            print(f"rank {RANK} {SCENARIO}: {_kind} {tensor.numel() * tensor.element_size()} B",
                  file=sys.stderr, flush=True)
            STARTED[SCENARIO] = STARTED.get(SCENARIO, 0) + 1
            return _start(*args, **kw)

        setattr(dist, kind, traced)


def main() -> None:
    global OUT_DIR, SCENARIO, OWN_GROUP
    store, out_dir, *names = sys.argv[1:]
    OUT_DIR = out_dir
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=WORLD)
    OWN_GROUP = dist.new_group(list(range(WORLD)))
    trace_collectives()
    results = {}
    for name in names:
        SCENARIO = name
        torch._dynamo.reset()
        try:
            results[name] = {"error": None, **SCENARIOS[name]()}
        except gp.RankMismatchError as e:
            results[name] = {"error": type(e).__name__, "message": str(e), "ranks": list(e.ranks)}
        except Exception as e:  # recorded, so the test shows it
            results[name] = {"error": type(e).__name__, "message": traceback.format_exc()}
        results[name]["collectives"] = STARTED.get(name, 0)
        with open(os.path.join(out_dir, f"rank{RANK}.json"), "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
