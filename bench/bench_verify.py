#!/usr/bin/env python3
"""What verify costs: per-call latency with ``verify=100`` against the same policy without
verify (interleaved in one run per model and backend, ``guardpolicy.tools.latency``), and
the cost of one verified call (binding the frame locals, the kept guards of the entry torch
would serve, the full guard manager) beside torch's own evaluation of the full guard set of
that model (``check`` of the manager with every offered guard). Prints markdown; with
``--results`` writes its section of bench/DETAILS.md.

The ratio that counts is of the amortized cost per call: the median over timed blocks of
each block's mean (``latency.block_mean``), since a median of single calls never sees the
one call in 100 that is verified. It is measured twice: between separately built objects
(each variant its own model copy, cache entry and compiled code, which on this machine
differ by several percent however many calls are timed), and on the same compiled objects,
verify's path against it bypassed call by call (``paired_ratio``), which is what the target
is judged on beside instructions per call (callgrind). ``--block`` is a multiple of 100, so
each block of timed calls holds one verified call per hundred.

Usage: bench_verify.py [--models mlp,gpt2] [--backends inductor,eager] [--policy NAME]
                       [--calls 2000] [--block 100] [--copies 2] [--checks 2000]
                       [--results bench/DETAILS.md]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import callgrind
import torch
from results_section import add_copies, check_blocks, md_head, md_row, met, pooled_from, split_machine, spread_note, write_section

import guardpolicy as gp
from guardpolicy.runtime import verify as gp_verify
from guardpolicy.runtime import torch_internals as tp
from guardpolicy.tools import latency
from guardpolicy.tools.common.models import build

BEGIN = "<!-- verify: begin (bench/bench_verify.py writes this section) -->"
END = "<!-- verify: end -->"
RATIO_TARGET = 1.02  # verify=100 / the same policy without verify, amortized per call (block means)
EVERY = 100


def variants(policy_name: str):
    """The ``make`` of ``latency.measure``: no filter, the policy, the policy with verify."""
    policy = gp.load_std(policy_name)

    def make(model, inputs, backend):
        plain = gp.compile(latency.own_class_copy(model), policy, backend=backend)
        checked = gp.compile(latency.own_class_copy(model), policy, backend=backend, verify=EVERY)
        for fn in (plain, checked):
            fn(*inputs)
        return [latency.Variant("eager", model), latency.no_filter(model, inputs, backend),
                latency.Variant(policy_name, plain),
                latency.Variant(f"{policy_name}, verify={EVERY}", checked, twin=policy_name)]

    return make


def _median_us(fn, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def verified_call_cost(model_name: str, policy_name: str, backend: str, checks: int) -> dict:
    """Per model: the median µs of one verified call's check (``CallPath.verify``), of its
    parts, and of torch's evaluation of the full guard set (the kept-only check beside it)."""
    torch.compiler.reset()
    model, inputs = build(model_name)
    opt = gp.compile(latency.own_class_copy(model), gp.load_std(policy_name), backend=backend, verify=EVERY)
    for _ in range(3):
        opt(*inputs)
    path = opt.forward
    call = EVERY * 1000  # a sampled call number; the count itself is not advanced
    code, f_locals = path.frame_locals(inputs, {})
    [entry] = [e for e in tp.all_cache_entries(code) if gp_verify.REGISTRY.get(e) is not None]
    frame = gp_verify.REGISTRY.get(entry)
    row = {
        "model": model_name,
        "offered": len(gp.stats(opt).explanations[0]),
        "dropped": sum(not e.keep for e in gp.stats(opt).explanations[0]),
        "verified_call_us": _median_us(lambda: path.verify(call, inputs, {}), checks),
        "bind_us": _median_us(lambda: path.frame_locals(inputs, {}), checks),
        "kept_check_us": _median_us(lambda: entry.guard_manager.check(f_locals), checks),
        "full_check_us": _median_us(lambda: frame.full.check(f_locals), checks),
    }
    assert not gp.stats(opt).violations
    torch.compiler.reset()
    return row


def paired_ratio(model_name: str, policy_name: str, backend: str, calls: int, copies: int) -> tuple[str, float, float, float]:
    """(model and backend, µs per call with verify's path bypassed, with it, their ratio) on
    the same compiled objects: ``copies`` verify=EVERY modules, each called ``calls // copies``
    times through its path (``CallPath``, the verified calls included) and as many times with
    its ``forward`` set back to torch's compiled callable (``path.inner``: what the policy
    without verify calls), the two alternating call by call. Model, cache entry and compiled
    code are then one, so neither where copies lie in memory nor the machine's drift between
    blocks enters the ratio: the median over blocks of EVERY calls of the block's ratio of
    means."""
    torch.compiler.reset()
    model, inputs = build(model_name)
    policy = gp.load_std(policy_name)
    modules = [gp.compile(latency.own_class_copy(model), policy, backend=backend, verify=EVERY) for _ in range(copies)]
    for m in modules:
        for _ in range(3 * latency.WARMUP):
            m(*inputs)
    blocks = []
    gc.collect()
    gc.disable()
    try:
        for r in range(calls // EVERY // copies):
            for m in modules:
                blocks.append(paired_block(m, inputs, first_through_path=r % 2 == 0))
    finally:
        gc.enable()
    ratio = statistics.median(b.path / b.bypassed for b in blocks)
    off_us = statistics.median(b.bypassed for b in blocks) / 1e3
    on_us = statistics.median(b.path for b in blocks) / 1e3
    torch.compiler.reset()
    return f"{model_name}, {backend}", off_us, on_us, ratio


class PairedBlock(NamedTuple):
    """``paired_block``'s result, in ns: the mean call through the path and bypassed (wall
    clock), the total of the path's verified calls in the block (wall clock), the two
    means in this thread's CPU time (``time.thread_time_ns``: no waiting counted), and each
    pair of calls as ``(through the path, bypassed, the path's call was verified)`` (wall
    clock)."""

    path: float
    bypassed: float
    verified: float
    path_cpu: float
    bypassed_cpu: float
    pairs: tuple[tuple[int, int, bool], ...]


def paired_block(module, inputs: tuple, first_through_path: bool, after=None) -> PairedBlock:
    """One block: EVERY calls through ``module``'s verify path and EVERY with it bypassed,
    alternating (which goes first alternates between blocks), each followed by ``after()``
    and timed with it (a verified call: ``stats.verified_calls`` moved, one per block).
    ``after``: the loop's own collective on many ranks (bench_ranks), timed with the call
    because a verified call's agreement waits for the slowest rank and the collective after
    it then waits that much less."""
    attrs = module.__dict__  # an nn.Module's own forward lives here: set without __setattr__
    path = attrs["forward"]
    stats = gp.stats(module)
    order = (True, False) if first_through_path else (False, True)
    wall, cpu = [0, 0], [0, 0]  # ns: bypassed, through the path
    verified_ns = 0
    pairs = []
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    for _ in range(EVERY):
        pair, was_verified = [0, 0], False
        for through_path in order:
            attrs["forward"] = path if through_path else path.inner
            verified = stats.verified_calls
            c0, t0 = cpu_clock(), clock()
            module(*inputs)
            if after is not None:
                after()
            took = clock() - t0
            cpu[through_path] += cpu_clock() - c0
            pair[through_path] = took
            if stats.verified_calls != verified:
                verified_ns, was_verified = verified_ns + took, True
        wall[True] += pair[True]
        wall[False] += pair[False]
        pairs.append((pair[True], pair[False], was_verified))
    attrs["forward"] = path
    return PairedBlock(wall[True] / EVERY, wall[False] / EVERY, verified_ns, cpu[True] / EVERY, cpu[False] / EVERY,
                       tuple(pairs))


def mean_ratios(tables: dict) -> list[tuple[str, float, float, float]]:
    """(model and backend, the policy's amortized µs per call, with verify's, their ratio) per
    table; amortized: ``latency.block_mean``."""
    out = []
    for key, rows in tables.items():
        for r in rows:
            if r["vs_torch_way"] is not None:
                plain = next(p for p in rows if p["variant"] == r["variant"].rsplit(",", 1)[0])
                out.append((key, plain["block_mean_us"], r["block_mean_us"], r["block_mean_us"] / plain["block_mean_us"]))
    return out


def instruction_rows(policy_name: str, runs: list[tuple[str, str]], calls: int) -> list[tuple[str, float, float, float]]:
    """(model and backend, the policy's instructions per call, with verify's, their ratio) per
    run, ``calls`` calls each (a multiple of EVERY: the verified calls included), counted by
    callgrind (bench/callgrind.py)."""
    out = []
    for (model, backend), counts in callgrind.count_runs("bench_verify", "variants", [policy_name], runs, calls).items():
        plain, checked = counts[policy_name], counts[f"{policy_name}, verify={EVERY}"]
        out.append((f"{model}, {backend}", plain, checked, checked / plain))
    return out


def model_table(key: str, data: dict) -> list[str]:
    """One model and backend's table: per measure (rows), eager, no filter, the policy without
    verify and with it (columns), and verify's ratio to without."""
    by = {r["variant"]: r for r in data["tables"][key]}
    cols = [by["eager"], by["no filter"], by[data["policy"]], by[f"{data['policy']}, verify={EVERY}"]]
    [(_, plain, checked, ratio)] = [m for m in mean_ratios({key: data["tables"][key]})]
    lines = [*md_head(["measure", "eager", "no filter", "without verify", f"verify={EVERY}",
                       f"ratio verify={EVERY} vs without (×)"]),
             md_row(["median (µs/call)", *(f"{r['median_us']:.1f}" for r in cols), f"{cols[3]['vs_torch_way']:.3f}"]),
             md_row(["p90 (µs/call)", *(f"{r['p90_us']:.1f}" for r in cols), ""]),
             md_row(["median ratio vs no filter (×)", *(f"{r['vs_no_filter']:.2f}" for r in cols), ""]),
             md_row(["amortized, separately built objects (µs/call)", "", "", f"{plain:.1f}", f"{checked:.1f}",
                     f"{ratio:.3f}"])]
    for k, off, on, paired in data["paired"]:
        if k == key:
            lines.append(md_row(["amortized, same compiled objects (µs/call; ratio: median of block ratios)", "", "",
                                 f"{off:.1f}", f"{on:.1f}", f"{paired:.4f}"]))
    for k, plain, checked, counted in data["instructions"]:
        if k == key:
            lines.append(md_row(["instructions per call", "", "", f"{plain:,.0f}", f"{checked:,.0f}",
                                 f"{counted:.4f}"]))
    return lines


def cost_table(rows: list[dict]) -> list[str]:
    """One verified call per model: guards offered and dropped, µs of the call, its parts and torch's full check."""
    lines = md_head(["model", "guards offered / dropped", "one verified call (µs)", "of which: binding (µs)",
                     "of which: kept guards (µs)", "torch's full guard evaluation (µs)"])
    for r in rows:
        lines.append(md_row([r["model"], f"{r['offered']} / {r['dropped']}", f"{r['verified_call_us']:.1f}",
                             f"{r['bind_us']:.1f}", f"{r['kept_check_us']:.1f}", f"{r['full_check_us']:.1f}"]))
    return lines


def intro(data: dict) -> list[str]:
    """The lines under the heading: what is measured, when, where, how many calls."""
    counted = bool(data["instructions"])
    head, tail = split_machine(data["machine"], 1)  # the line breaks before its last part
    calls = (f"{data['calls']} timed calls per variant{pooled_from(data['copies'])}, interleaved in blocks of "
             f"{data['block']};")
    recorded = f"every offered guard. Recorded {data['date']} on {head}"
    return [
        f"µs {'and instructions ' if counted else ''}per call of `gp.compile(model, {data['policy']}, "
        f"verify={EVERY})` against the same",
        "policy without verify, on the backend each table names; then one verified call beside torch's evaluation of",
        *([f"{recorded},", f"{tail}; {calls}"] if tail else [f"{recorded};", calls]),
        f"on the same compiled objects {data['calls']} calls each way, alternating call by call"
        + (f"; instructions: {data['instruction_calls']} calls per\nvariant under callgrind." if counted else ".")
        + " Amortized rows count the verified calls.",
    ]


def verdict(data: dict) -> str:
    """The target's line: verify's ratio in instructions, on the same compiled objects and
    between separately built objects, each its largest and where."""
    said = []
    for name, rows, digits in (("instructions", data["instructions"], 4), ("same compiled objects", data["paired"], 4),
                               ("separately built objects", mean_ratios(data["tables"]), 3)):
        if not rows:
            continue
        key, *_, ratio = max(rows, key=lambda r: r[3])
        spread = ""
        spreads = [r["copy_spread"] for rs in data["tables"].values() for r in rs if r["copy_spread"] is not None]
        if name == "separately built objects" and spreads:  # one build: no spread
            spread = f", builds up to {100 * max(spreads):.1f}% apart"
        said.append(f"{name} **{met(ratio <= RATIO_TARGET)}** (largest {ratio:.{digits}f}, {key}{spread})")
    return f"Target: verify={EVERY} at most {RATIO_TARGET}× without it, per call amortized: {'; '.join(said)}."


def render(data: dict) -> str:
    """The verify section of DETAILS.md from one run: ``data`` holds date, machine, policy,
    calls, block, copies, instruction_calls, ``tables`` (per ``"model, backend"``,
    ``latency.measure``'s rows), ``paired`` (``paired_ratio``'s tuples), ``instructions``
    (``instruction_rows``'s tuples; empty when none were counted), ``costs``
    (``verified_call_cost``'s rows) and cost_backend."""
    lines = [BEGIN, "## What verify costs, per call (`bench/bench_verify.py`)", "", *intro(data), ""]
    for key, rows in data["tables"].items():
        lines += [f"**{key}**{spread_note(rows)}", "", *model_table(key, data), ""]
    lines += [f"**One verified call** ({data['cost_backend']} backend; the check only, not the call)", "",
              *cost_table(data["costs"]), "", verdict(data), END, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,gpt2")
    ap.add_argument("--backends", default="inductor,eager")
    ap.add_argument("--policy", default="skip_guard_on_all_nn_modules", choices=gp.STD_POLICIES)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--block", type=int, default=EVERY, help=f"calls per interleaved block (a multiple of {EVERY})")
    add_copies(ap)
    ap.add_argument("--checks", type=int, default=2000, help="timed repetitions of one verified call")
    ap.add_argument("--instructions", default="mlp:inductor,mlp:eager,gpt2:inductor,gpt2:eager",
                    help="model:backend runs whose instructions per call callgrind counts ('' for none)")
    ap.add_argument("--instruction-calls", type=int, default=2 * EVERY, help="calls counted per variant")
    ap.add_argument("--results", help="the DETAILS.md whose verify section to write")
    args = ap.parse_args(argv)
    check_blocks(ap, args, EVERY)
    if args.instruction_calls % EVERY:
        ap.error(f"--instruction-calls must be a multiple of {EVERY}")
    torch.set_num_threads(1)
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    models, backends = args.models.split(","), args.backends.split(",")
    tables = latency.measure(variants(args.policy), models, backends, args.calls, args.block, progress, args.copies)
    paired = []
    for m in models:
        for b in backends:
            progress(f"{m}, {b}: timing verify's path against it bypassed, on the same objects")
            paired.append(paired_ratio(m, args.policy, b, args.calls, args.copies))
    costs = [verified_call_cost(m, args.policy, backends[-1], args.checks) for m in models]
    runs = [tuple(r.split(":")) for r in args.instructions.split(",") if r]
    progress(f"counting instructions under callgrind: {args.instructions or 'none'}")
    instructions = instruction_rows(args.policy, runs, args.instruction_calls)
    text = render({"date": datetime.date.today().isoformat(), "machine": latency.machine(), "policy": args.policy,
                   "calls": args.calls, "block": args.block, "copies": args.copies,
                   "instruction_calls": args.instruction_calls, "tables": tables, "paired": paired,
                   "instructions": instructions, "costs": costs, "cost_backend": backends[-1]})
    print(text)
    if args.results:
        write_section(Path(args.results), BEGIN, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
