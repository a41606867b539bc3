#!/usr/bin/env python3
"""Verify across ranks (docs/distributed.md): on 2 and 4 local gloo ranks, the cost of the
agreement of one verified call (``RankGroup.flagged``: one ``all_reduce`` of one int64;
beside it, one of a byte per rank, for comparison), and the per-call ratio of
``gp.compile(..., verify=100)`` against the same policy without verify, every rank running
the same loop (the sampled calls meet in the agreement).
Prints markdown; ``--results`` writes its section of bench/DETAILS.md.

Usage: bench_ranks.py [--ranks 2,4] [--models mlp,gpt2] [--backends inductor,eager]
                      [--calls 4000] [--block 200] [--copies 2] [--paired 300] [--agreements 2000]
                      [--markdown OUT.md] [--results bench/DETAILS.md]

The ranks are processes of this script (``--worker``), each given its RANK and WORLD_SIZE
and a file store; each prints one JSON line of its medians, and the tables show the slowest
rank's. A call is timed as a block of ``--block`` calls (a multiple of 100, so that every
block holds the same number of verified calls, agreement included), blocks of the two
variants interleaved, each variant built ``--copies`` times and its copies' blocks pooled
(the table says how far the copies without verify were apart: the ratio's resolution); the
per-call figure is a block's median time over its calls.

On the same objects (``--paired`` blocks of 100 calls each way, after the interleaved
ones), each rank's verify modules run through their path and bypassed, call by call; the
section gives that ratio as a mean with its 95% interval, on the median call with its
interval, and in CPU time.

Both variants run the loop a multi-process job runs: after each call the ranks meet in one
collective of their own (``step_sync``: an ``all_reduce`` of one float, a training step's
gradient all_reduce in small). Without it, ranks that never meet drift apart, and the one
collective verify adds would be charged with all of that drift (on 2 cores: 15-18 ms per
verified call); with it, the ratio is what verify adds to a loop whose ranks already meet.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_section import add_copies, check_blocks, md_head, md_row, met, pooled_from, run_parser, write_section

BEGIN = "<!-- ranks: begin (bench/bench_ranks.py writes this section) -->"
END = "<!-- ranks: end -->"
RATIO_TARGET = 1.03  # verify=100 / no verify, per call, median of the run, on every rank
EVERY = 100
POLICY = "skip_guard_on_all_nn_modules"


def median_us(samples: list[float], per: int) -> float:
    return statistics.median(samples) / per * 1e6


def collective_cost(collective, n: int) -> float:
    """Median µs of one ``collective()``, over ``n``, in blocks of 50 (after 50 untimed)."""
    for _ in range(50):
        collective()
    blocks = []
    for _ in range(max(1, n // 50)):
        t = time.perf_counter()
        for _ in range(50):
            collective()
        blocks.append(time.perf_counter() - t)
    return median_us(blocks, 50)


def per_rank_flags(size: int):
    """An ``all_reduce`` (max) of a byte per rank: what ``RankGroup.flagged`` did before it
    summed one element (gloo chunks a tensor over the ranks, so this costs more rounds)."""
    import torch
    import torch.distributed as dist

    flags = torch.zeros(size, dtype=torch.uint8)
    return lambda: dist.all_reduce(flags, op=dist.ReduceOp.MAX)


def call_ratio(model_name: str, backend: str, calls: int, block: int, copies: int, pairs: int) -> dict:
    """Per-call medians (µs) of verify=100 and no verify, by interleaved blocks of calls
    (each variant built ``copies`` times, its blocks pooled; ``spread``: how far its copies'
    medians were apart), the mean agreement inside the verified calls
    (``RankAgreement.verify_agreement_us``), and ``same_objects_ratio``: on the verify modules
    themselves, their path against it bypassed call by call (``bench_verify.paired_block``,
    ``pairs`` blocks of them over the copies; see ``same_objects``)."""
    import torch

    import guardpolicy as gp
    from bench_verify import paired_block
    from guardpolicy.tools import latency
    from guardpolicy.tools.common.models import build

    torch.compiler.reset()
    model, inputs = build(model_name)
    policy = gp.load_std(POLICY)
    variants = []  # (name, copy, compiled object): each its own cache entries
    for c in range(copies):
        variants.append(("plain", c, gp.compile(latency.own_class_copy(model), policy, backend=backend)))
        variants.append(("verify", c, gp.compile(latency.own_class_copy(model), policy, backend=backend,
                                                  verify=EVERY, on_violation="recompile")))
    times: dict[tuple[str, int], list[float]] = {(name, c): [] for name, c, _ in variants}
    step = torch.zeros(1)

    def step_sync() -> None:  # the loop's own collective, after every call, in both variants
        torch.distributed.all_reduce(step)

    with torch.no_grad():
        want = latency.output_tensor(model(*inputs))
        for _, _, opt in variants:  # compile, warm up (the ranks meet at the sampled calls)
            for _ in range(block):
                out = opt(*inputs)
                step_sync()
            if not torch.allclose(latency.output_tensor(out), want, atol=1e-5, rtol=1e-4):
                raise SystemExit(f"bench_ranks: {model_name}, {backend}: output differs from eager")
        stats = [gp.stats(opt) for name, _, opt in variants if name == "verify"]
        warm = (sum(st.ranks.verify_agreements for st in stats), sum(st.ranks.verify_agreement_s for st in stats))
        gc.collect()
        gc.disable()
        try:
            for r in range(max(1, calls // (block * copies))):
                shift = r % len(variants)
                for name, c, opt in variants[shift:] + variants[:shift]:
                    t = time.perf_counter()
                    for _ in range(block):
                        opt(*inputs)
                        step_sync()
                    times[name, c].append(time.perf_counter() - t)
            # The same verify modules, their path against it bypassed, call by call (bench_verify).
            paired = [paired_block(opt, inputs, r % 2 == 0, step_sync)
                      for r in range(max(1, pairs // copies))
                      for name, _, opt in variants if name == "verify"]
        finally:
            gc.enable()
    if any(st.violations for st in stats) or len({gp.stats(opt).compiles for _, _, opt in variants}) != 1:
        raise SystemExit(f"bench_ranks: {model_name}, {backend}: a violation or a recompile while timing")
    agreed = sum(st.ranks.verify_agreements for st in stats) - warm[0]
    agree_s = sum(st.ranks.verify_agreement_s for st in stats) - warm[1]
    pooled = {name: [t for (n, _), ts in times.items() if n == name for t in ts] for name in ("plain", "verify")}
    plain_copies = [median_us(ts, block) for (name, _), ts in times.items() if name == "plain"]
    plain_us, verify_us = median_us(pooled["plain"], block), median_us(pooled["verify"], block)
    torch.compiler.reset()
    return {"model": model_name, "backend": backend, "plain_us": plain_us, "verify_us": verify_us,
            "ratio": verify_us / plain_us, "agreements": agreed,
            **same_objects(paired),
            "spread": max(plain_copies) / min(plain_copies) - 1 if copies > 1 else None,
            "in_call_agree_us": agree_s / agreed * 1e6 if agreed else None}


def same_objects(paired: list, resamples: int = 200) -> dict:
    """From ``bench_verify.paired_block``'s blocks (one verified call in each), in wall clock:
    ``same_objects_ratio``, all path calls against all bypassed ones (the mean cost per call
    over the run, the verified calls included), and ``same_objects_ci``, the half-width of
    its 95% interval (1.96 standard errors of the blocks' mean difference); ``median_ratio``,
    the same cost on a median call (``median_call_ratio``), and ``median_interval``, its 95%
    interval from ``resamples`` resamplings of the blocks (seeded: the same run gives the
    same interval); ``unsampled_ratio``, the unsampled path calls' total against the
    bypassed ones'; ``verified_extra_us``, a verified call's mean beyond a bypassed call; and
    ``cpu_ratio``, the mean ratio in this thread's CPU time (no waiting counted)."""
    import torch

    blocks = len(paired)
    bypassed = sum(b.bypassed for b in paired) / blocks  # ns per call
    verified = sum(b.verified for b in paired) / blocks  # ns: one verified call per block
    unsampled = sum(b.path * EVERY - b.verified for b in paired) / (blocks * (EVERY - 1))
    differences = [b.path - b.bypassed for b in paired]
    ci = 1.96 * statistics.stdev(differences) / blocks ** 0.5 / bypassed if blocks > 1 else float("nan")
    pairs = torch.tensor([b.pairs for b in paired], dtype=torch.float64)  # [blocks, EVERY, 3]
    generator = torch.Generator().manual_seed(0)
    resampled = torch.cat([median_call_ratio(pairs[torch.randint(blocks, (10, blocks), generator=generator)])
                           for _ in range(resamples // 10)]).sort().values
    return {"same_objects_ratio": sum(b.path for b in paired) / blocks / bypassed, "same_objects_ci": ci,
            "median_ratio": median_call_ratio(pairs[None]).item(),
            "median_interval": (resampled[int(0.025 * len(resampled))].item(),
                                resampled[int(0.975 * len(resampled)) - 1].item()),
            "unsampled_ratio": unsampled / bypassed, "verified_extra_us": (verified - bypassed) / 1e3,
            "cpu_ratio": sum(b.path_cpu for b in paired) / sum(b.bypassed_cpu for b in paired)}


def median_call_ratio(runs):
    """Per run (``runs``: a float64 tensor ``[runs, blocks, EVERY, 3]`` of pairs ``(through the
    path, bypassed, verified)``, ns), verify's cost per call on a median call: the median
    pair's difference on the unsampled calls plus a verified call's mean extra (beyond the
    mean bypassed call) spread over its ``EVERY`` calls, over the median bypassed call. A call
    delayed by something else (ranks that share 2 cores take turns), landing on either call of
    a pair, moves a mean by its whole delay but the median by nothing; the verified calls,
    verify's real cost, count with their mean."""
    import torch

    path, bypassed, verified = (x.flatten(1) for x in runs.unbind(-1))
    sampled = verified.bool()
    unsampled = torch.where(sampled, torch.nan, path - bypassed).nanmedian(dim=1).values
    extra = (path * sampled).sum(1) / sampled.sum(1) - bypassed.mean(1)
    return 1 + ((EVERY - 1) * unsampled + extra) / (EVERY * bypassed.median(dim=1).values)


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    from guardpolicy.distributed.agreement import RankGroup

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{args.worker}", rank=rank, world_size=world)
    group = RankGroup(None, 600.0)
    result = {"rank": rank, "agree_us": collective_cost(lambda: group.flagged(False), args.agreements),
              "per_rank_us": collective_cost(per_rank_flags(group.size), args.agreements),
              "rows": [call_ratio(m, b, args.calls, args.block, args.copies, args.paired)
                       for m in args.models.split(",") for b in args.backends.split(",")]}
    dist.destroy_process_group()
    print(json.dumps(result), flush=True)


def run_world(world: int, args) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--worker", os.path.join(tmp, "store"), "--agreements",
               str(args.agreements), "--calls", str(args.calls), "--block", str(args.block), "--copies", str(args.copies),
               "--paired", str(args.paired),
               "--models", args.models, "--backends", args.backends]
        env = {**os.environ, "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
        procs = [subprocess.Popen(cmd, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True)
                 for r in range(world)]
        try:
            outs = [p.communicate(timeout=3600)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs):
            raise SystemExit(f"bench_ranks: a rank of {world} failed")
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def row_cells(on_ranks: list[dict]) -> list[str]:
    """One model and backend's cells, from that row as each rank measured it: per column the
    rank with the largest ratio (separately built, same objects' mean, median call)."""
    worst = max(on_ranks, key=lambda x: x["ratio"])
    same = max(on_ranks, key=lambda x: x["same_objects_ratio"])
    median = max(on_ranks, key=lambda x: x["median_ratio"])
    low, high = median["median_interval"]
    return [f"{worst['model']}, {worst['backend']}", f"{max(x['in_call_agree_us'] or 0.0 for x in on_ranks):.1f}",
            f"{worst['plain_us']:.1f}", f"{worst['verify_us']:.1f}", f"{worst['ratio']:.3f}",
            f"{100 * worst['spread']:.1f}%" if worst["spread"] is not None else "",
            f"{same['same_objects_ratio']:.3f} ±{same['same_objects_ci']:.3f}",
            f"{median['median_ratio']:.3f} [{low:.3f}–{high:.3f}]", f"{same['unsampled_ratio']:.3f}",
            f"{same['verified_extra_us']:.0f}", f"{max(x['cpu_ratio'] for x in on_ranks):.3f}"]


ROW_HEADER = ["model, backend", "agreement inside a verified call (µs)", "without verify (µs/call)",
              f"verify={EVERY} (µs/call)", "ratio, separately built (×)", "builds without verify apart",
              "same objects: ratio of means (× ± 95%)", "same objects: median call (× [95% interval])",
              "same objects: unsampled vs bypassed calls (×)", "verified call's extra cost (µs)",
              "same objects: CPU time ratio (×)"]


def tables(results: dict[int, list[dict]]) -> list[str]:
    """The agreement per rank count (the slowest rank's), then per rank count a table of its
    models and backends; each followed by a blank line."""
    lines = md_head(["ranks", "one agreement (µs)", "an all_reduce of a byte per rank instead (µs)"], left=0)
    lines += [md_row([str(world), f"{max(r['agree_us'] for r in ranks):.1f}",
                      f"{max(r['per_rank_us'] for r in ranks):.1f}"]) for world, ranks in results.items()]
    lines.append("")
    for world, ranks in results.items():
        lines += [f"**{world} ranks**", "", *md_head(ROW_HEADER)]
        lines += [md_row(row_cells([r["rows"][i] for r in ranks])) for i in range(len(ranks[0]["rows"]))]
        lines.append("")
    return lines


def verdict(results: dict[int, list[dict]]) -> str:
    """The target's line: on the same objects the median call, the CPU time and the mean (with
    its interval), then between separately built objects; each the largest of every rank."""
    rows = [row for ranks in results.values() for r in ranks for row in r["rows"]]  # every rank's
    worst, cpu, median = (max(row[key] for row in rows) for key in ("ratio", "cpu_ratio", "median_ratio"))
    mean = max(rows, key=lambda row: row["same_objects_ratio"])
    median_top = max(row["median_interval"][1] for row in rows)
    paired, ci = mean["same_objects_ratio"], mean["same_objects_ci"]
    spreads = [row["spread"] for row in rows if row["spread"] is not None]
    apart = f", builds up to {100 * max(spreads):.1f}% apart" if spreads else ""  # one build: no spread
    spans = (f", an interval that holds {RATIO_TARGET}: the mean does not decide"
             if paired - ci <= RATIO_TARGET <= paired + ci else "")
    return (f"Target: verify={EVERY} at most {RATIO_TARGET}× without it on every rank. Same objects: median call "
            f"**{met(median <= RATIO_TARGET)}** (largest {median:.3f}, highest interval end {median_top:.3f}), "
            f"CPU time **{met(cpu <= RATIO_TARGET)}** (largest {cpu:.3f}), mean **{met(paired <= RATIO_TARGET)}** "
            f"(largest {paired:.3f} ± {ci:.3f}{spans}); separately built objects **{met(worst <= RATIO_TARGET)}** "
            f"(largest {worst:.3f}{apart}).")


def render(data: dict) -> str:
    """The ranks section of DETAILS.md from one run: ``data`` holds date, machine, calls,
    block, copies, paired, agreements and ``results`` (per rank count, each rank's JSON
    line: agree_us, per_rank_us and ``rows``, ``call_ratio``'s dicts)."""
    worlds = [str(w) for w in data["results"]]
    ranks = worlds[0] if len(worlds) == 1 else f"{', '.join(worlds[:-1])} and {worlds[-1]}"
    pooled = pooled_from(data["copies"]).strip()
    return "\n".join([
        BEGIN,
        "## Verify across ranks: the agreement of a verified call (`bench/bench_ranks.py`)",
        "",
        f"µs per call of `gp.compile(model, {POLICY}, verify={EVERY})` against the same policy without verify",
        f"on {ranks} local gloo ranks (one torch thread each; every call followed by one collective, as a training "
        "step's",
        "all_reduce), on each rank, the largest rank's ratio, and the cost of the agreement (`RankGroup.flagged`: one "
        "`all_reduce` of one",
        f"int64). Recorded {data['date']} on {data['machine']}; {data['calls']} calls per variant",
        f"{pooled + ' ' if pooled else ''}in blocks of {data['block']}; on the same compiled objects {data['paired']} "
        f"blocks of {EVERY} calls each way;",
        f"{data['agreements']} agreements.",
        "",
        *tables(data["results"]),
        verdict(data["results"]),
        END,
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    ap.set_defaults(calls=4000, block=200)
    add_copies(ap)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--agreements", type=int, default=2000, help="timed agreements per rank")
    ap.add_argument("--paired", type=int, default=300,
                    help=f"blocks of {EVERY} calls each way on the same objects, split among the copies")
    ap.add_argument("--markdown", help="also write the section's markdown to this file")
    ap.add_argument("--results", help="the DETAILS.md whose ranks section to write")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # a rank: the file store's path
    args = ap.parse_args(argv)
    check_blocks(ap, args, EVERY)
    if args.worker:
        worker(args)
        return 0
    from guardpolicy.tools.bench import machine_description

    results = {}
    for world in (int(w) for w in args.ranks.split(",")):
        print(f"{world} ranks ...", file=sys.stderr, flush=True)
        results[world] = run_world(world, args)
    text = render({"date": time.strftime("%Y-%m-%d"), "machine": machine_description(), "calls": args.calls,
                   "block": args.block, "copies": args.copies, "paired": args.paired,
                   "agreements": args.agreements, "results": results})
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    if args.results:
        write_section(Path(args.results), BEGIN, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
