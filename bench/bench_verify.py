#!/usr/bin/env python3
"""What verify costs: per-call latency with ``verify=100`` against the same policy without
verify (interleaved in one run per model and backend, ``guardpolicy.tools.latency``), and
the cost of one verified call (binding the frame locals, the kept guards of the entry torch
would serve, the full guard manager) beside torch's own evaluation of the full guard set of
that model (``check`` of the manager with every offered guard). Prints markdown; with
``--results`` writes its section of bench/RESULTS.md.

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
                       [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import callgrind
import torch
from results_section import add_copies, check_blocks, write_section

import guardpolicy as gp
from guardpolicy import verify as gp_verify
from guardpolicy import _torch_private as tp
from guardpolicy.tools import latency
from guardpolicy.tools._models import build

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
        return [latency.Variant("eager", model), latency._no_filter(model, inputs, backend),
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
    torch._dynamo.reset()
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
    torch._dynamo.reset()
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
    torch._dynamo.reset()
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
    torch._dynamo.reset()
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


def paired_table(rows: list[tuple[str, float, float, float]]) -> list[str]:
    lines = [f"| model, backend | path bypassed µs per call | verify={EVERY} µs per call | ratio (median of block ratios) |",
             "|---|---:|---:|---:|"]
    lines += [f"| {key} | {off:.1f} | {on:.1f} | {ratio:.4f} |" for key, off, on, ratio in rows]
    return lines


def cost_table(rows: list[dict]) -> list[str]:
    lines = ["| model | guards offered / dropped | one verified call µs | of which: bind µs | kept guards µs "
             "| torch's full guard evaluation µs |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['offered']} / {r['dropped']} | {r['verified_call_us']:.1f} | "
                     f"{r['bind_us']:.1f} | {r['kept_check_us']:.1f} | {r['full_check_us']:.1f} |")
    return lines


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


def mean_table(tables: dict) -> list[str]:
    lines = [f"| model, backend | policy µs per call (block means) | verify={EVERY} µs per call (block means) | ratio |",
             "|---|---:|---:|---:|"]
    for key, plain, checked, ratio in mean_ratios(tables):
        lines.append(f"| {key} | {plain:.1f} | {checked:.1f} | {ratio:.3f} |")
    return lines


def instruction_rows(policy_name: str, runs: list[tuple[str, str]], calls: int) -> list[tuple[str, float, float, float]]:
    """(model and backend, the policy's instructions per call, with verify's, their ratio) per
    run, ``calls`` calls each (a multiple of EVERY: the verified calls included), counted by
    callgrind (bench/callgrind.py)."""
    out = []
    for (model, backend), counts in callgrind.count_runs("bench_verify", "variants", [policy_name], runs, calls).items():
        plain, checked = counts[policy_name], counts[f"{policy_name}, verify={EVERY}"]
        out.append((f"{model}, {backend}", plain, checked, checked / plain))
    return out


def instruction_table(rows: list[tuple[str, float, float, float]]) -> list[str]:
    lines = [f"| model, backend | policy instructions per call | verify={EVERY} instructions per call | ratio |",
             "|---|---:|---:|---:|"]
    lines += [f"| {key} | {plain:,.0f} | {checked:,.0f} | {ratio:.4f} |" for key, plain, checked, ratio in rows]
    return lines


def section(text: str, tables: dict, policy_name: str, instructions: list, paired: list) -> str:
    worst = max(((key, ratio) for key, _, _, ratio in mean_ratios(tables)), key=lambda t: t[1])
    spread = max((r["copy_spread"] or 0.0) for rows in tables.values() for r in rows)
    verdict = lambda ok: "met" if ok else "not met"  # noqa: E731
    counted = ""
    if instructions:
        most = max(instructions, key=lambda r: r[3])
        counted = (f"instructions per call: **{verdict(most[3] <= RATIO_TARGET)}** (largest {most[3]:.4f}, on "
                   f"{most[0]}); ")
    if paired:
        most = max(paired, key=lambda r: r[3])
        counted += (f"wall clock on the same compiled objects: **{verdict(most[3] <= RATIO_TARGET)}** (largest "
                    f"{most[3]:.4f}, on {most[0]}); ")
    return "\n".join([
        BEGIN,
        "## verify: the cost of re-checking dropped guards (`bench/bench_verify.py`)",
        "",
        f"`gp.compile(model, {policy_name}, verify={EVERY})` against the same policy without verify,",
        "interleaved in one run per model and backend; then the cost of one verified call (what a",
        f"sampled call adds: one in {EVERY}) beside torch's evaluation of every offered guard.",
        "",
        text.rstrip("\n"),
        "",
        f"Target: verify={EVERY} at most {RATIO_TARGET}x the same policy without it, per call amortized (the "
        f"verified calls count): {counted}wall clock between separately built objects (median of block means): "
        f"**{verdict(worst[1] <= RATIO_TARGET)}** (largest {worst[1]:.3f}, on {worst[0]}, where copies of one "
        f"variant were up to {100 * spread:.1f}% apart).",
        END,
        "",
    ])


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
    ap.add_argument("--results", help="the RESULTS.md whose verify section to write")
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
    lines = [f"Recorded {latency.stamp(args.calls, args.block, args.copies)}.", ""]
    for key, rows in tables.items():
        lines += [f"**{key}**", "", *latency.table(rows), "", latency.spread_line(rows), ""]
    lines += [f"**per call, amortized** (the median over blocks of {args.block} calls of each block's mean: the "
              "verified calls included)", "", *mean_table(tables), ""]
    lines += [f"**per call, amortized, on the same compiled objects** ({args.copies} verify={EVERY} modules, each "
              f"called through its path and with its forward set back to torch's compiled callable, alternating call "
              f"by call; {args.calls} calls each way)", "", *paired_table(paired), ""]
    if instructions:
        lines += [f"**per call, instructions** (callgrind, bench/callgrind.py: {args.instruction_calls} calls per "
                  f"variant, the verified calls included; the same count for two identical loops differs by "
                  f"about 0.3%)", "", *instruction_table(instructions), ""]
    lines += [f"**one verified call ({backends[-1]} backend; the check only, not the call)**", "",
              *cost_table(costs), ""]
    text = "\n".join(lines)
    print(text)
    if args.results:
        write_section(Path(args.results), BEGIN, END, section(text, tables, args.policy, instructions, paired))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
