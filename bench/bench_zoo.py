#!/usr/bin/env python3
"""What ``python -m guardpolicy suggest`` costs on the model zoo, against a plain
``torch.compile`` of the same model called as many times.

Per zoo model (tests/python/models: a ResNet-like net with BatchNorm2d in ``eval()``, a
ViT-like model, a UNet-like denoiser, a PEFT LoRA model, BatchNorm + Dropout in ``eval()``),
two child processes, each measured alone (wall time; peak resident set from ``os.wait4``'s
``ru_maxrss``, so one child's peak never hides another's):

1. ``python -m guardpolicy suggest --model FILE --backend B --bench-backends ''`` (the policy,
   no timing): its compiles (frames compiled, recompiles included) and the model calls it
   made (eager and compiled, from its ``--json``);
2. ``torch.compile(model, backend=B)`` called under ``torch.no_grad()`` as many times as
   suggest called the compiled model, its compiles counted by Dynamo's metrics.

Prints a markdown table; ``--results bench/RESULTS.md`` writes it into that page's ``zoo``
section. The target (issue 35): on the ResNet-like net, suggest's peak RSS at most 2x plain
``torch.compile``'s and under 1.5 GB.

Usage: bench_zoo.py [--models resnet_model,vit_model,...] [--backend inductor]
                    [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_section import write_section

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "python" / "models"
ZOO = ("resnet_model", "vit_model", "unet_model", "peft_lora_model", "batchnorm_dropout_model")
BEGIN = "<!-- zoo: begin (bench/bench_zoo.py writes this section) -->"
END = "<!-- zoo: end -->"

#: The plain torch.compile child: build, compile, call N times, print the frames compiled.
PLAIN = """
import sys, torch
from guardpolicy.runtime import torch_internals
from guardpolicy.tools.common import model_spec
built = model_spec.resolve(sys.argv[1]).build()
opt = torch.compile(built.fn, backend=sys.argv[2])
with torch.no_grad():
    for _ in range(int(sys.argv[3])):
        opt(*built.args, **built.kwargs)
print(len(torch_internals.compilation_metrics()))
"""


def measure(name: str, backend: str) -> dict:
    """One zoo model: suggest, then plain torch.compile with as many compiled calls."""
    model = str(MODELS / f"{name}.py")
    with tempfile.TemporaryDirectory() as tmp:
        suggest = [sys.executable, "-m", "guardpolicy", "suggest", "--model", model, "-o", f"{tmp}/p.gpol",
                   "--backend", backend, "--bench-backends", "", "--json", f"{tmp}/p.json", "-q"]
        s_wall, s_peak, _ = _timed(suggest)
        audit = json.loads(Path(f"{tmp}/p.json").read_text())["audit"]
    calls = 1 + sum(1 for g in audit["groups"] for t in g["trials"] if t["outcome"] != "not applied")
    p_wall, p_peak, out = _timed([sys.executable, "-c", PLAIN, model, backend, str(calls)])
    return {"model": name, "backend": backend, "suggest_s": s_wall, "suggest_rss": s_peak,
            "suggest_compiles": audit["frames"] + audit["recompiles"], "changes": audit["changes_planned"],
            "calls": calls, "plain_s": p_wall, "plain_rss": p_peak, "plain_compiles": int(out.split()[-1])}


def _timed(argv: list[str]) -> tuple[float, float, str]:
    """``(wall s, peak RSS MiB, stdout)`` of one child process, its peak alone (``os.wait4`` on
    its pid); exits with the child's stderr on its failure."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err_file:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_file, text=True, cwd=ROOT)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        err_file.seek(0)
        err = err_file.read()
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"{' '.join(argv[:5])} ...: exit {p.returncode}\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out


def table(rows: list[dict]) -> str:
    head = ("| model | backend | suggest: wall s | compiles | changes planned | compiled calls | peak RSS MiB "
            "| plain torch.compile: wall s | compiles | peak RSS MiB | RSS ratio (×) |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [f"| {r['model']} | {r['backend']} | {r['suggest_s']:.1f} | {r['suggest_compiles']} | {r['changes']} | "
             f"{r['calls']} | {r['suggest_rss']:.0f} | {r['plain_s']:.1f} | {r['plain_compiles']} | "
             f"{r['plain_rss']:.0f} | {r['suggest_rss'] / r['plain_rss']:.2f} |" for r in rows]
    return "\n".join([head, *lines])


def verdict(rows: list[dict]) -> str:
    r = next((r for r in rows if r["model"] == "resnet_model"), None)
    if r is None:
        return "Verdict: the ResNet-like net was not measured in this run."
    ok = r["suggest_rss"] <= 2 * r["plain_rss"] and r["suggest_rss"] < 1536
    return (f"Verdict: target {'met' if ok else 'NOT met'}: on the ResNet-like net suggest peaks at "
            f"{r['suggest_rss']:.0f} MiB, {r['suggest_rss'] / r['plain_rss']:.2f}× plain torch.compile's "
            f"{r['plain_rss']:.0f} MiB (target ≤ 2× and under 1536 MiB).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--results", type=Path, help="write the zoo section of this page (bench/RESULTS.md)")
    args = ap.parse_args()
    from guardpolicy.tools.common.timing.machine import machine_description

    rows = []
    for name in args.models.split(","):
        rows.append(measure(name.strip(), args.backend))
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr)
    date = datetime.date.today().isoformat()
    text = (f"{BEGIN}\n`bench/bench_zoo.py --backend {args.backend}`, recorded {date} on {machine_description()}: "
            f"each command a child process of its own, peak RSS from `os.wait4`. suggest writes the policy "
            f"without timing it (`--bench-backends ''`); plain torch.compile is called as many times as suggest "
            f"called the compiled model.\n\n{table(rows)}\n\n{verdict(rows)}\n{END}\n")
    print(text)
    if args.results:
        write_section(args.results, BEGIN, END, text)


if __name__ == "__main__":
    main()
