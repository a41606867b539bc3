#!/usr/bin/env python3
"""Per-call latency of direct dispatch (``gp.compile(..., dispatch="direct")``) against
(a) ``torch.compile`` with no filter and (b) ``skip_all_guards_unsafe`` with
``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` set the torch way (entered once
per block of timed calls), with the unchecked floor beside them: the cache entry's compiled
code called by hand, no guard checked. One interleaved run per model and backend
(``guardpolicy.tools.latency``: each variant its own cache entry, outputs checked against
eager's before timing). Prints markdown; ``--results`` writes its section of
bench/DETAILS.md.

``--parts`` prints instead what one direct call costs by part, caches hot (the table of
docs/dispatch.md "What it costs"): the entry's compiled code replaced by a no-op, the
minimum over repeated runs of 200 calls of torch's kept-guard check, binding the frame
locals and the whole call; the rest of the path is the difference. Beside it, the median of
the kept-guard check timed right after a forward (eager backend), as each call meets it.

Usage: bench_dispatch.py [--models mlp,gpt2] [--backends inductor,eager] [--calls 400]
                         [--block 20] [--verify 100] [--results bench/DETAILS.md] [--parts]
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
from results_section import (add_copies, check_blocks, md_head, md_row, met, percall_cells, percall_header, pooled_from,
                             run_parser, spread_note, write_section)

import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.runtime.call import capture, dispatch
from guardpolicy.tools import latency
from guardpolicy.tools.common.models import build

BEGIN = "<!-- dispatch: begin (bench/bench_dispatch.py writes this section) -->"
END = "<!-- dispatch: end -->"
TORCH_WAY = "skip_all_guards + stance (torch)"
BASELINE = TORCH_WAY.removesuffix(" (torch)")  # what the ratio columns and targets name
#: per policy, the goal for direct dispatch / skip_all_guards + stance with inductor (the issue's)
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
    entry = torch_internals.cache_entries_of(forward)[0]
    code = capture.entry_function(entry.code, forward)
    return latency.Variant("unchecked floor: the entry's code called by hand", functools.partial(code, mod),
                           twin=TORCH_WAY)


def variants(verify: int | None):
    def make(model, inputs: tuple, backend: str) -> list[latency.Variant]:
        return [latency.Variant("eager", copy.deepcopy(model)), latency.no_filter(model, inputs, backend),
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
        leaves = len(torch_internals.leaf_sources(entry.manager))
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


def dispatch_table(rows: list[dict], counts: dict[str, float] | None) -> list[str]:
    """One model and backend's table: the per-call columns against skip_all_guards + stance
    and, with ``counts`` (its instructions per call by variant), the counts and their ratio."""
    header = percall_header(BASELINE)
    if counts:
        header += ["instructions per call", f"instructions ratio vs {BASELINE} (×)"]
    lines = md_head(header)
    for r in rows:
        cells = percall_cells(r, True)
        if counts:
            n = counts.get(r["variant"])
            cells += [f"{n:,.0f}", f"{n / counts[TORCH_WAY]:.3f}"] if n is not None else ["", ""]
        lines.append(md_row(cells))
    return lines


def goal_ratios(data: dict) -> dict[str, list[tuple[str, float, float | None]]]:
    """Per policy of GOALS: (model, wall-clock ratio, instructions ratio or None) of each
    inductor run, against skip_all_guards + stance."""
    out: dict[str, list[tuple[str, float, float | None]]] = {std: [] for std in GOALS}
    for key, rows in data["tables"].items():
        if not key.endswith(", inductor"):
            continue
        counts = data["instructions"].get(key)
        for r in rows:
            for std in GOALS:
                if r["variant"].startswith(f"direct: {std}"):
                    counted = counts[r["variant"]] / counts[TORCH_WAY] if counts else None
                    out[std].append((key.split(", ", 1)[0], r["vs_torch_way"], counted))
    return out


def verdict(data: dict) -> str:
    """The targets' line: per policy, met or not per inductor model, on the wall clock and in
    instructions (a model meets a goal when both do); the first figures say which is which."""
    first = True

    def figures(wall: float, counted: float | None) -> str:
        nonlocal first
        text = (f"{wall:.2f}× wall clock" + (f", {counted:.2f}× instructions" if counted is not None else "")
                if first else f"{wall:.2f}×" + (f", {counted:.2f}×" if counted is not None else ""))
        first = False
        return text

    parts = []
    for std, found in goal_ratios(data).items():
        if not found:
            continue
        goal = GOALS[std]
        groups: dict[str, list[tuple[str, float, float | None]]] = {}
        for model, wall, counted in found:
            groups.setdefault(met(wall <= goal and (counted is None or counted <= goal)), []).append(
                (model, wall, counted))
        if len(groups) == 1:
            [(word, rows)] = groups.items()
            said = f"**{word}** (" + "; ".join(f"{m} {figures(w, c)}" for m, w, c in rows) + ")"
        else:
            said = ", ".join(f"**{word}** on {', '.join(m for m, _, _ in rows)} ("
                             + ("; ".join(f"{m} {figures(w, c)}" for m, w, c in rows) if len(rows) > 1
                                else figures(rows[0][1], rows[0][2])) + ")"
                             for word, rows in groups.items())
        parts.append(f"{std} at most {goal}×: {said}")
    return f"Targets (inductor, ratio vs {BASELINE}), " + ("; ".join(parts) or "no inductor run") + "."


def render(data: dict) -> str:
    """The dispatch section of DETAILS.md from one run: ``data`` holds date, machine, calls,
    block, copies, instruction_calls, ``tables`` (per ``"model, backend"``,
    ``latency.measure``'s rows) and ``instructions`` (per ``"model, backend"``, instructions
    per call by variant; empty when none were counted)."""
    counted = bool(data["instructions"])
    lines = [
        BEGIN,
        "## Direct dispatch, per call (`bench/bench_dispatch.py`)",
        "",
        f"µs {'and instructions ' if counted else ''}per call of `gp.compile(model, policy, dispatch=\"direct\")` "
        "(kept guards checked, then the",
        "compiled code called without Dynamo's per-call machinery) against `torch.compile` with no filter and against",
        "torch's zero-guard setting (`skip_all_guards_unsafe` + `set_stance(skip_guard_eval_unsafe=True)`), beside the",
        "unchecked floor (the compiled code called by hand, no guard checked), on the backend each table names.",
        f"Recorded {data['date']} on {data['machine']};",
        f"{data['calls']} timed calls per variant{pooled_from(data['copies'])}, interleaved in blocks of "
        f"{data['block']}" + (f"; instructions:\n{data['instruction_calls']} calls per variant under callgrind."
                              if counted else "."),
        "",
    ]
    for key, rows in data["tables"].items():
        lines += [f"**{key}**{spread_note(rows)}", "", *dispatch_table(rows, data["instructions"].get(key)), ""]
    return "\n".join(lines + [verdict(data), "", END, ""])


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    add_copies(ap)
    ap.add_argument("--verify", type=int, default=100, help="verify=N for the direct rows (0: off)")
    ap.add_argument("--results", help="the DETAILS.md whose dispatch section to write")
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
    runs = [tuple(r.split(":")) for r in args.instructions.split(",") if r]
    progress(f"counting instructions under callgrind: {args.instructions or 'none'}")
    instructions = instruction_rows(verify, runs, args.instruction_calls)
    text = render({"date": datetime.date.today().isoformat(), "machine": latency.machine(), "calls": args.calls,
                   "block": args.block, "copies": args.copies, "instruction_calls": args.instruction_calls,
                   "tables": tables, "instructions": instructions})
    print(text)
    if args.results:
        write_section(Path(args.results), BEGIN, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
