#!/usr/bin/env python3
"""Per-call latency of direct dispatch (``gp.compile(..., dispatch="direct")``) against
(a) ``torch.compile`` with no filter and (b) ``skip_all_guards_unsafe`` with
``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` set the torch way (entered once
per block of timed calls), with the unchecked floor beside them: the cache entry's compiled
code called by hand, no guard checked. One interleaved run per model and backend
(``guardpolicy.tools.latency``: each variant its own cache entry, outputs checked against
eager's before timing). Prints markdown; ``--results`` writes its section of
bench/RESULTS.md.

``--parts`` prints instead what one direct call costs by part, caches hot (the table of
docs/dispatch.md "What it costs"): the entry's compiled code replaced by a no-op, the
minimum over repeated runs of 200 calls of torch's kept-guard check, binding the frame
locals and the whole call; the rest of the path is the difference. Beside it, the median of
the kept-guard check timed right after a forward (eager backend), as each call meets it.

Usage: bench_dispatch.py [--models mlp,gpt2] [--backends inductor,eager] [--calls 400]
                         [--block 20] [--verify 100] [--results bench/RESULTS.md] [--parts]
"""

from __future__ import annotations

import copy
import datetime
import functools
import inspect
import sys
import statistics
import time
import timeit
from pathlib import Path

import callgrind
import torch
from results_section import add_copies, check_blocks, run_parser, write_section

import guardpolicy as gp
from guardpolicy import dispatch
from guardpolicy.tools import latency
from guardpolicy.tools._models import build

BEGIN = "<!-- dispatch: begin (bench/bench_dispatch.py writes this section) -->"
END = "<!-- dispatch: end -->"
TORCH_WAY = "(b) skip_all_guards + set_stance (torch)"
#: per policy, the goal for direct dispatch / (b) with inductor (the issue's)
GOALS = {"skip_guard_on_all_nn_modules": 1.0, "keep_tensor_guards": 0.85}


def _warm(fn, inputs: tuple, label: str) -> None:
    """Calls ``fn`` until direct dispatch has captured its entry; SystemExit if it refuses."""
    for _ in range(2 * dispatch.DEFAULT_WARMUP + 2):
        fn(*inputs)
    d = gp.stats(fn).dispatch
    if d.state != "direct":
        raise SystemExit(f"{label}: direct dispatch is {d.state}: {[str(r) for r in d.refusals]}")


def _direct(model, inputs: tuple, backend: str, std: str, verify: int | None) -> latency.Variant:
    kwargs = {"verify": verify} if verify else {}
    fn = gp.compile(latency.own_class_copy(model), gp.load_std(std), backend=backend, dispatch="direct", **kwargs)
    label = f"direct: {std}" + (f", verify={verify}" if verify else "") + " (gp.compile)"
    _warm(fn, inputs, label)
    return latency.Variant(label, fn, twin=TORCH_WAY)


def _torch_way(model, inputs: tuple, backend: str) -> latency.Variant:
    fn = torch.compile(latency.own_class_copy(model), backend=backend,
                       options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    fn(*inputs)
    return latency.Variant(TORCH_WAY, fn, latency.stance_block)


def _floor(model, inputs: tuple, backend: str) -> latency.Variant:
    """The entry's compiled code called by hand, as vLLM's dispatcher does: no guard at all."""
    mod = latency.own_class_copy(model)
    compiled = torch.compile(mod, backend=backend, options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    compiled(*inputs)
    forward = type(mod).forward
    entry = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(forward.__code__)[0]
    code = dispatch._entry_function(entry.code, forward)
    return latency.Variant("unchecked floor: the entry's code called by hand", functools.partial(code, mod),
                           twin=TORCH_WAY)


def variants(verify: int | None):
    def make(model, inputs: tuple, backend: str) -> list[latency.Variant]:
        return [latency.Variant("eager", copy.deepcopy(model)), latency._no_filter(model, inputs, backend),
                _torch_way(model, inputs, backend),
                *(_direct(model, inputs, backend, std, verify) for std in GOALS),
                _floor(model, inputs, backend)]

    return make


def _hot_us(fn, repeat: int = 150, number: int = 200) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _noop(*args, **kwargs) -> None:
    return None


def parts_row(name: str, std: str) -> str:
    """One row of the ``--parts`` table: a direct-dispatch module of the demo model ``name``
    under ``std`` (eager backend: the compiled code is replaced by ``_noop`` anyway)."""
    from guardpolicy import _torch_private

    model, inputs = build(name)
    with torch.no_grad():
        fn = gp.compile(latency.own_class_copy(model), gp.load_std(std), backend="eager", dispatch="direct")
        _warm(fn, inputs, f"{name}, {std}")
        target = gp.stats(fn).dispatch._target
        entry, lead = target.entries[0], target.lead
        f_locals = target.bind(*inputs) if lead is None else target.bind(lead, *inputs)
        if not entry.root.check(f_locals):
            raise SystemExit(f"{name}, {std}: the kept guards fail on the example inputs")
        cold = []  # the check as a call makes it: right after the previous call's forward
        for _ in range(200):
            fn(*inputs)
            t0 = time.perf_counter_ns()
            entry.root.check(f_locals)
            cold.append(time.perf_counter_ns() - t0)
        entry.fn = _noop  # what is left is the path itself
        leaves = len(_torch_private.leaf_sources(entry.manager))
        noop = _hot_us(lambda: _noop(lead, *inputs))
        check = _hot_us(lambda: entry.root.check(f_locals))
        bind = _hot_us(lambda: target.bind(*inputs) if lead is None else target.bind(lead, *inputs))
        whole = _hot_us(lambda: fn(*inputs)) - noop
        if gp.stats(fn).dispatch.state != "direct":
            raise SystemExit(f"{name}, {std}: direct dispatch stopped while timing")
    return (f"| {name} | `{std}` | {leaves} | {check:.1f} | {bind:.1f} | {whole - check - bind:.1f} | {whole:.1f} "
            f"| {statistics.median(cold) / 1e3:.1f} |")


def parts(models: list[str]) -> str:
    lines = [f"Measured {datetime.date.today().isoformat()}, {latency.machine()}; µs per call, caches hot "
             "but the last column.", "",
             "| model | policy | kept leaf guards | guard check (torch) | binding | rest of the path | total "
             "| guard check after a forward |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [parts_row(name, std) for name in models for std in GOALS]
    return "\n".join(lines)


def instruction_rows(verify: int | None, runs: list[tuple[str, str]], calls: int) -> dict[str, dict[str, float]]:
    """Per ``"model, backend"``: instructions per call of each variant (callgrind,
    bench/callgrind.py), ``calls`` calls each."""
    counts = callgrind.count_runs("bench_dispatch", "variants", [verify], runs, calls)
    return {f"{m}, {b}": row for (m, b), row in counts.items()}


def instruction_table(counts: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| model, backend | variant | instructions per call | / (b) |", "|---|---|---:|---:|"]
    for key, row in counts.items():
        base = row[TORCH_WAY]
        lines += [f"| {key} | {label} | {n:,.0f} | {n / base:.3f} |" for label, n in row.items()]
    return lines


def _verdicts(ratios: dict[str, list[tuple[str, float]]]) -> list[str]:
    """``key, policy: ratio (goal, met or not)`` for the inductor runs of ``ratios``
    (per ``"model, backend"``: (variant label, ratio to (b)))."""
    out = []
    for key, rows in ratios.items():
        if not key.endswith("inductor"):
            continue
        for label, ratio in rows:
            for std, goal in GOALS.items():
                if label.startswith(f"direct: {std}"):
                    out.append(f"{key}, {std}: {ratio:.2f}x (goal ≤ {goal}x, **{'met' if ratio <= goal else 'not met'}**)")
    return out


def section(text: str, tables: dict, instructions: dict) -> str:
    clock = _verdicts({key: [(r["variant"], r["vs_torch_way"]) for r in rows if r["vs_torch_way"] is not None]
                       for key, rows in tables.items()})
    counted = _verdicts({key: [(label, n / row[TORCH_WAY]) for label, n in row.items()]
                         for key, row in instructions.items()})
    return "\n".join([
        BEGIN,
        "## Direct dispatch per call (`bench/bench_dispatch.py`)",
        "",
        "`gp.compile(model, policy, dispatch=\"direct\")` after warm-up (the kept guards checked by",
        "torch's guard manager, then the entry's compiled code called without Dynamo's per-call",
        "machinery) against (a) `torch.compile` with no filter and (b) `skip_all_guards_unsafe` with",
        "`set_stance(skip_guard_eval_unsafe=True)` entered once per block of timed calls; the unchecked",
        "floor is the entry's compiled code called by hand, no guard checked. Each variant has its own",
        "cache entry, interleaved in one run per model and backend (`guardpolicy.tools.latency`).",
        "",
        text.rstrip("\n"),
        "",
        "Goals (inductor, ratio to (b)): wall clock (medians): " + ("; ".join(clock) or "no inductor run") + ". "
        "Instructions per call: " + ("; ".join(counted) or "no inductor run counted") + ".",
        END,
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    add_copies(ap)
    ap.add_argument("--verify", type=int, default=100, help="verify=N for the direct rows (0: off)")
    ap.add_argument("--results", help="the RESULTS.md whose dispatch section to write")
    ap.add_argument("--parts", action="store_true", help="print the hot cost of a direct call by part, only")
    ap.add_argument("--instructions", default="mlp:inductor,mlp:eager,gpt2:inductor,gpt2:eager",
                    help="model:backend runs whose instructions per call callgrind counts ('' for none)")
    ap.add_argument("--instruction-calls", type=int, default=200, help="calls counted per variant")
    args = ap.parse_args(argv)
    check_blocks(ap, args)
    if args.parts:
        torch.set_num_threads(1)
        print(parts(args.models.split(",")))
        return 0
    verify = args.verify or None
    if verify and "verify" not in inspect.signature(gp.compile).parameters:
        print("this guardpolicy has no verify: the direct rows run without it", file=sys.stderr)
        verify = None
    torch.set_num_threads(1)
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    tables = latency.measure(variants(verify), args.models.split(","), args.backends.split(","),
                             args.calls, args.block, progress, args.copies)
    lines = [f"Recorded {latency.stamp(args.calls, args.block, args.copies)}.", ""]
    for key, rows in tables.items():
        lines += [f"**{key}**", "", *latency.table(rows), "", latency.spread_line(rows), ""]
    runs = [tuple(r.split(":")) for r in args.instructions.split(",") if r]
    progress(f"counting instructions under callgrind: {args.instructions or 'none'}")
    instructions = instruction_rows(verify, runs, args.instruction_calls)
    if instructions:
        lines += [f"**instructions per call** (callgrind, bench/callgrind.py: {args.instruction_calls} calls per "
                  "variant)", "", *instruction_table(instructions), ""]
    text = "\n".join(lines).replace("/ torch way", "/ (b)")
    print(text)
    if args.results:
        write_section(Path(args.results), BEGIN, END, section(text, tables, instructions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
