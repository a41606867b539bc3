#!/usr/bin/env python3
"""What a ``gp.would_recompile`` question costs, against torch's own check of one guard manager
per cache entry (the floor: torch's lookup of a call runs at most that), with no model forward.

Two models, each compiled with ``watch_state`` on the eager backend (``dynamic=False``) and
warmed on three buckets, so that its first frame holds three cache entries: a HF Llama decode
step (``LlamaForCausalLM``, 1 layer, random weights; batch sizes 1, 2, 4) and a small MLP given
a new options object per call (batch sizes 2, 4, 8). Timed per question, interleaved in one
process (garbage collector off; each sample is ``--inner`` back-to-back questions, samples of
the variants alternate, ``--samples`` each; the median per question):

* ``check, every entry``: torch's check of each of the three entries' kept guard manager
  (``guard_manager.root.check(f_locals)``, as torch's lookup runs it), on frame locals bound
  once: one guard check per entry;
* ``would_recompile, served``: a call served by the last entry torch tries (so every entry is
  checked), the frame locals bound from the call's arguments each time;
* ``would_recompile, compiles``: a call no entry serves (each entry's failing guard named:
  ``check_verbose`` and the name, expected and got);
* ``forward``: one call of the compiled model, served, for scale (what a question avoids).

Prints a markdown section; ``--results bench/DETAILS.md`` also writes it there between its
markers. bench/RESULTS.md keeps the verdict (target of issue 56: served ≤ 1.0× one check per
entry).

``--instructions N`` also counts N questions per variant under callgrind (a child process,
as bench/callgrind.py counts), where wall-clock time on a shared machine is noise.

Usage: bench_would_recompile.py [--samples 31] [--inner 200] [--instructions 200] [--results bench/DETAILS.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from results_section import publish

import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.runtime.serving.frame import top_frame
from guardpolicy.tools.common.timing.machine import machine_description

BEGIN = "<!-- would_recompile: begin (bench/bench_would_recompile.py writes this section) -->"
END = "<!-- would_recompile: end -->"
TITLE = "What a would_recompile question costs (bench/bench_would_recompile.py)"


def llama_case() -> tuple[object, tuple, tuple, str]:
    """``(compiled, served call, compiling call, label)`` of the HF Llama decode step."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                      max_position_embeddings=64)
    step = gp.compile(transformers.LlamaForCausalLM(config).eval(), "watch_state", backend="eager", dynamic=False)
    kw = {"use_cache": False}
    for batch in (1, 2, 4):
        step(torch.zeros(batch, 1, dtype=torch.long), **kw)
    return step, ((torch.zeros(1, 1, dtype=torch.long),), kw), ((torch.zeros(3, 1, dtype=torch.long),), kw), \
        "HF Llama decode step (1 layer)"


@dataclasses.dataclass
class Options:
    scale: float
    act: str


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x, options):
        y = self.lin1(x) * options.scale
        return self.lin2(torch.tanh(y) if options.act == "tanh" else torch.relu(y))


def options_case() -> tuple[object, tuple, tuple, str]:
    """``(compiled, served call, compiling call, label)`` of the MLP with an options object."""
    step = gp.compile(Scaled().eval(), "watch_state", backend="eager", dynamic=False)
    for batch in (2, 4, 8):
        step(torch.zeros(batch, 16), Options(0.5, "relu"))
    served = ((torch.zeros(2, 16), Options(0.5, "relu")), {})
    return step, served, ((torch.zeros(2, 16), Options(0.5, "tanh")), {}), "MLP, a new options object per call"


def per_question(fn, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def variants_of(case) -> tuple[dict, int]:
    """The timed variants of a case (``{name: fn}``) and its cache entries, checked: the
    served question is served by the last entry torch tries, the other would compile."""
    step, served, compiling, _ = case
    frame = top_frame(step)
    entries = torch_internals.lookup_entries(frame.code, frame.ctx.callback, torch_internals.region_of(frame.ctx))
    f_locals = frame.bind(*served)
    roots = [e.manager.root for e in entries]  # what torch's lookup runs per entry (RootGuardManager.check)
    answer = gp.would_recompile(step, *served[0], **served[1])
    assert answer.served_by == entries[-1].compile_id, answer  # every entry asked
    assert gp.would_recompile(step, *compiling[0], **compiling[1]).would_compile

    def check_every_entry():
        for root in roots:
            root.check(f_locals)

    return {
        "check, every entry": check_every_entry,
        "would_recompile, served": lambda: gp.would_recompile(step, *served[0], **served[1]),
        "would_recompile, compiles": lambda: gp.would_recompile(step, *compiling[0], **compiling[1]),
        "forward": lambda: step(*served[0], **served[1]),
    }, len(entries)


def measure(case, samples: int, inner: int) -> dict:
    step, label = case[0], case[3]
    variants, entries = variants_of(case)
    compiles = gp.stats(step).compiles
    times: dict[str, list[float]] = {name: [] for name in variants}
    gc.disable()
    try:
        for i in range(samples):
            order = list(variants.items())
            for name, fn in (order if i % 2 == 0 else order[::-1]):
                times[name].append(per_question(fn, inner if name != "forward" else max(inner // 10, 1)))
    finally:
        gc.enable()
    assert gp.stats(step).compiles == compiles, "a question compiled"
    medians = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    return {"label": label, "entries": entries, **medians}


CASES = (llama_case, options_case)
_TOTALS = re.compile(r"^totals:\s*(\d+)", re.M)


def count_instructions(calls: int) -> dict[tuple[str, str], float]:
    """``{(case label, variant): instructions per question}``, counted by callgrind in a child
    process (as bench/callgrind.py counts: instrumentation on only around the counted calls)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions: valgrind is not installed")
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")
    if platform.machine() == "x86_64":
        env.update(ATEN_CPU_CAPABILITY="avx2")
    with tempfile.TemporaryDirectory(prefix="gp-callgrind-") as tmp:
        out = Path(tmp) / "cg.out"
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--instr-atstart=no",
                              "--collect-atstart=no", sys.executable, __file__, "--child", str(calls)],
                             capture_output=True, text=True, env=env, timeout=5400, cwd=Path(__file__).parent)
        if run.returncode:
            raise SystemExit(f"--instructions: the child failed ({run.returncode}):\n{run.stderr[-3000:]}")
        labels = json.loads(run.stdout.strip().splitlines()[-1])
        return {tuple(label): int(_TOTALS.search(Path(f"{out}.{i}").read_text()).group(1)) / calls
                for i, label in enumerate(labels, 1)}


def _child(calls: int) -> None:
    torch.set_num_threads(1)
    labels = []
    with torch.no_grad():
        cases = [case() for case in CASES]
        built = [(case[3], variants_of(case)[0]) for case in cases]
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
        for label, variants in built:
            for name, fn in variants.items():
                fn()  # the first instrumented question, uncounted
                torch_internals.valgrind_toggle()
                for _ in range(calls):
                    fn()
                torch_internals.valgrind_toggle_and_dump_stats()
                labels.append([label, name])
    print(json.dumps(labels))


def render(rows: list[dict], counts: dict, args: argparse.Namespace) -> str:
    counted = f"; instructions: {args.instructions} questions per variant under callgrind" if counts else ""
    lines = [f"Recorded {datetime.date.today().isoformat()} on {machine_description()}, one torch thread; "
             f"{args.samples} samples of {args.inner} questions per variant, interleaved, medians{counted}; eager "
             "backend, `watch_state`, three cache entries in the first frame.", "",
             "| model | variant | µs per question | × check | instructions | × check |", "|---|---|---:|---:|---:|---:|"]
    worst = 0.0
    for r in rows:
        base, base_n = r["check, every entry"], counts.get((r["label"], "check, every entry"))
        for name in ("check, every entry", "would_recompile, served", "would_recompile, compiles", "forward"):
            n = counts.get((r["label"], name))
            lines.append(f"| {r['label']} | {name} | {r[name]:.1f} | {r[name] / base:.2f} | "
                         f"{f'{n:,.0f}' if n else ''} | {f'{n / base_n:.2f}' if n and base_n else ''} |")
        ratio = (counts[(r["label"], "would_recompile, served")] / base_n if base_n
                 else r["would_recompile, served"] / base)
        worst = max(worst, ratio)
    unit = "instructions" if counts else "wall clock"
    verdict = "met" if worst <= 1.0 else "not met"
    forward = "; ".join(f"{r['label']}: {_of_forward(r, counts):.2f}× a served forward" for r in rows)
    lines += ["", f"Verdict: target (a served question ≤ 1.0× one guard check per entry) **{verdict}** in {unit} "
              f"(largest {worst:.2f}×: binding the frame locals, reading the cache entries and the record cost more "
              f"than torch's check of three entries); no question ran the model (the compile count is unchanged); "
              f"a served question costs, in {unit}, {forward}."]
    return "\n".join(lines)


def _of_forward(row: dict, counts: dict) -> float:
    """A served question over a served forward of the same model (instructions when counted)."""
    key = row["label"]
    if counts.get((key, "forward")):
        return counts[(key, "would_recompile, served")] / counts[(key, "forward")]
    return row["would_recompile, served"] / row["forward"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=31)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--instructions", type=int, default=0,
                    help="questions per variant counted under callgrind (0: none)")
    ap.add_argument("--results", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with torch.no_grad():
        rows = [measure(case(), args.samples, args.inner) for case in CASES]
    counts = count_instructions(args.instructions) if args.instructions else {}
    publish(render(rows, counts, args), args.results, BEGIN, END, TITLE)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(int(sys.argv[2]))
    else:
        main()
