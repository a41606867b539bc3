#!/usr/bin/env python3
"""Instructions per call, counted by callgrind: how PyTorch counts guard overhead where
wall-clock time is noise (its PR-time guard benchmarks count instructions;
``torch.utils.benchmark.Timer.collect_callgrind`` does it for one statement). On this
project's machine two builds of one variant differ by several percent in wall-clock time;
instruction counts of two identical loops differ by about 0.3%.

``count(bench, factory, args, model, backend, calls)`` runs this file as a child under
``valgrind --tool=callgrind`` with instrumentation off (importing torch and compiling run
about five times slower than native, not fifty). The child builds the variants of a bench
(``getattr(import_module(bench), factory)(*args)``: the ``make`` that
``guardpolicy.tools.latency.measure`` takes), checks their outputs against eager's, warms
each up as the timed runs do (``Variant.warm_up``), turns instrumentation on
(``callgrind_control -i on``), then per variant, inside its ``block_ctx`` (the stance, say),
collects ``calls`` calls and dumps them
(``torch_internals.valgrind_toggle`` / ``valgrind_toggle_and_dump_stats``). The parent reads each
dump's ``totals:`` line. Counts cover everything a call executes in this process (the
interpreter, torch, guardpolicy), not cache misses or waiting.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_TOTALS = re.compile(r"^totals:\s*(\d+)", re.M)


def count(bench: str, factory: str, args: list, model: str, backend: str, calls: int,
          timeout_s: int = 3600) -> dict[str, float]:
    """``{variant label: instructions per call}`` for the variants ``bench.factory(*args)``
    builds for the demo model ``model`` (``mlp``, ``gpt2``) and ``backend``, ``calls``
    collected calls each. Raises SystemExit when valgrind is missing or the child fails."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("callgrind.count: valgrind is not installed (apt-get install valgrind)")
    spec = {"bench": bench, "factory": factory, "args": args, "model": model, "backend": backend, "calls": calls}
    # No compile workers under valgrind; no AVX-512 in the code Inductor writes (gcc runs
    # outside valgrind and would build for the host's -march=native, whose AVX-512
    # instructions valgrind cannot decode) nor in ATen's kernels.
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")
    if platform.machine() == "x86_64":
        env.update(TORCHINDUCTOR_CPP_MARCH="x86-64-v3", ATEN_CPU_CAPABILITY="avx2")
    with tempfile.TemporaryDirectory(prefix="gp-callgrind-") as tmp:
        out = Path(tmp) / "cg.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--instr-atstart=no",
               "--collect-atstart=no", sys.executable, __file__, "--child", json.dumps(spec)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s,
                             cwd=Path(__file__).parent)
        if run.returncode:
            raise SystemExit(f"callgrind.count {model}, {backend}: the child failed ({run.returncode}):\n"
                             f"{run.stderr[-3000:]}")
        labels = json.loads(run.stdout.strip().splitlines()[-1])
        counts = {}
        for i, label in enumerate(labels, 1):
            totals = _TOTALS.search(Path(f"{out}.{i}").read_text(encoding="utf-8"))
            counts[label] = int(totals.group(1)) / calls
        return counts


def timed_and_counted(bench: str, factory: str, variants: Any, name: str, backend: str, args: Any) -> tuple:
    """The variants ``variants(name, backend)`` of a bench of library models (called with no
    inputs), checked against eager, timed in one interleaved run (``args.calls``,
    ``args.block``) and counted (``count`` of ``bench.factory(name)``, ``args.instructions``
    calls; none when 0): ``(latency.summarize rows, {label: instructions per call})``."""
    from guardpolicy.tools import latency

    vs = variants(name, backend)
    latency.check_outputs(vs, ())
    latency.run(vs, (), args.calls, args.block)
    counts = count(bench, factory, [name], "mlp", backend, args.instructions, timeout_s=5400) if args.instructions else {}
    return latency.summarize(vs), counts


def count_runs(bench: str, factory: str, args: list, runs: list[tuple[str, str]], calls: int,
               workers: int = 2) -> dict[tuple[str, str], dict[str, float]]:
    """``count`` for each ``(model, backend)`` of ``runs``, ``workers`` children at a time
    (instruction counts do not depend on what else the machine runs)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {run: pool.submit(count, bench, factory, args, *run, calls) for run in runs}
        return {run: f.result() for run, f in futures.items()}


def _child(spec: dict) -> None:
    import torch

    from guardpolicy.runtime import torch_internals
    from guardpolicy.tools import latency
    from guardpolicy.tools.common.models import build

    torch.set_num_threads(1)
    make = getattr(importlib.import_module(spec["bench"]), spec["factory"])(*spec["args"])
    model, inputs = build(spec["model"])
    variants = make(model, inputs, spec["backend"])
    latency.check_outputs(variants, inputs)
    for v in variants:
        v.warm_up(*inputs)
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
    for v in variants:
        with v.timing_context():
            v.fn(*inputs)  # the first instrumented call, uncounted
            torch_internals.valgrind_toggle()
            for _ in range(spec["calls"]):
                v.fn(*inputs)
            torch_internals.valgrind_toggle_and_dump_stats()
    print(json.dumps([v.label for v in variants]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]))
    else:
        raise SystemExit("bench/callgrind.py is run by callgrind.count, not by hand")
