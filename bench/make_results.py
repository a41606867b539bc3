#!/usr/bin/env python3
"""Writes the first section of bench/DETAILS.md from one run of both benchmarks (`make bench`).

Runs the C++ VM benchmark (build/bench/guardpolicy_vm_bench: ns per entry of the -O1 VM,
the -O0 VM and the reference AST interpreter over guard entries captured from real models)
and the end-to-end Python benchmark (bench/bench_e2e.py: a policy's call time on real
GuardFilterEntry lists against torch's own filter, same entries, same run), then reports
each as ratios against the baseline measured in the same run, with the machine and date,
and the command-line startup. Only its own marked section is replaced (``render`` gives it
from the numbers of one run; bench/results_section.py); the other benchmarks' sections stay.
Usage: make_results.py [--vm-bench PATH] [--out bench/DETAILS.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from results_section import write_section

ROOT = Path(__file__).resolve().parents[1]


def run_vm(binary: Path) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([str(binary), "--benchmark_min_time=0.3", "--benchmark_repetitions=3",
                        "--benchmark_report_aggregates_only=true", f"--benchmark_out={out.name}",
                        "--benchmark_out_format=json"], check=True, stdout=subprocess.DEVNULL)
        data = json.load(open(out.name))
    return {b["run_name"]: b["ns_per_entry"] for b in data["benchmarks"] if b.get("aggregate_name") == "median"}


def run_e2e() -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, str(ROOT / "bench/bench_e2e.py"), "--json", out.name], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(out.name))


def time_command(cmd: list[str], runs: int) -> tuple[float, float]:
    """(median wall ms, median CPU ms: user + system) of `runs` runs of `cmd`."""
    import resource
    import statistics
    import time

    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        walls.append((time.perf_counter() - start) * 1e3)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3)
    return statistics.median(walls), statistics.median(cpus)


def measure_startup(runs: int = 30) -> dict:
    """The installed `guardpolicy` command (the C++ executable) against `python -m guardpolicy`
    on the same lint of the std policies: median wall and CPU ms of each."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "policies/std").glob("*.gpol"))
    exe = Path(sys.executable).parent / "guardpolicy"
    exe_wall, exe_cpu = time_command([str(exe), "lint", *files], runs)
    py_wall, py_cpu = time_command([sys.executable, "-m", "guardpolicy", "lint", *files], max(5, runs // 3))
    return {"files": len(files), "runs": runs, "exe_wall": exe_wall, "exe_cpu": exe_cpu,
            "py_wall": py_wall, "py_cpu": py_cpu}


def startup_lines(s: dict) -> list[str]:
    return [
        "## Command-line startup",
        "",
        f"Wall and CPU time of `guardpolicy lint policies/std/*.gpol` ({s['files']} files), median of {s['runs']} runs,",
        "against `python -m guardpolicy lint` (what the command was as a Python console script).",
        "",
        "| command | wall (ms/run) | CPU (ms/run) |",
        "|---|---:|---:|",
        f"| `guardpolicy` (the installed C++ executable) | {s['exe_wall']:.1f} | {s['exe_cpu']:.1f} |",
        f"| `python -m guardpolicy` | {s['py_wall']:.0f} | {s['py_cpu']:.0f} |",
        "",
        f"Target: a lint starts and ends within 20 ms of CPU: **{met(s['exe_cpu'] <= 20)}** "
        f"({s['exe_cpu']:.1f} ms; {s['py_cpu'] / s['exe_cpu']:.0f}x less CPU than `python -m`; "
        "wall time adds the wait for a CPU on this shared VM).",
        "",
    ]


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def vm_table(ns: dict[str, float]) -> list[str]:
    policies = [k.split("/", 1)[1] for k in ns if k.startswith("vm_O1/")]
    lines = ["| policy | VM, -O1 bytecode (ns/entry) | VM, -O0 bytecode (ns/entry) | "
             "reference interpreter (ns/entry) | reference vs VM -O1 (× faster) |",
             "|---|---:|---:|---:|---:|"]
    for p in policies:
        o1, o0, ref = ns[f"vm_O1/{p}"], ns[f"vm_O0/{p}"], ns[f"reference/{p}"]
        lines.append(f"| {p} | {o1:.1f} | {o0:.1f} | {ref:.1f} | {ref / o1:.1f}x |")
    return lines


def e2e_tables(e2e: dict) -> list[str]:
    """One table per model: each policy's ns per entry against its baseline's, same run."""
    lines: list[str] = []
    models = list(dict.fromkeys(r["model"] for r in e2e["results"]))
    for m in models:
        rows = [r for r in e2e["results"] if r["model"] == m]
        lines += [f"**{m}** ({rows[0]['entries']} guard entries)", "",
                  "| policy | baseline | policy (ns/entry) | baseline (ns/entry) | ratio vs baseline (×) |",
                  "|---|---|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['policy']} | `{r['reference']}` | {r['policy_ns_per_entry']:.1f} | "
                         f"{r['ref_ns_per_entry']:.1f} | {r['ratio']:.2f}x |")
        lines.append("")
    return lines


def met(ok: bool) -> str:
    return "met" if ok else "not met"


BEGIN = "<!-- make-results: begin (bench/make_results.py writes this section) -->"
END = "<!-- make-results: end -->"


def render(ns: dict[str, float], e2e: dict, startup: dict, recorded: str, system: str, cpus: int) -> str:
    """The make-results section of DETAILS.md (title, VM, end to end, startup) from the
    numbers of one run; ``recorded`` its date, ``system`` its OS and release."""
    std = [r["ratio"] for r in e2e["results"] if r["policy"] != "rules30"]
    r30 = [r["ratio"] for r in e2e["results"] if r["policy"] == "rules30"]
    machine = e2e["machine"]  # machine_description(): CPU, arch, CPUs, system, Python, torch
    lines = [
        BEGIN,
        "# Benchmark details",
        "",
        "Every table of every benchmark; [bench/RESULTS.md](RESULTS.md) is the summary (one line per",
        "benchmark: its date, target and verdict). Each section: what is measured, one table per model,",
        "the verdict on the current targets. A ratio compares with a baseline measured in the same run.",
        "How the runs are interleaved, what medians, p90, ratios and intervals mean, how to run each",
        "benchmark and which targets are current: [bench/README.md](README.md).",
        "",
        f"The sections up to the command-line startup: recorded {recorded} by `make bench` "
        f"(`bench/make_results.py`) on {machine}, a shared VM (expect ±20% between runs).",
        "",
        "## Guard filter VM, per guard entry (`bench/vm_bench.cpp`)",
        "",
        "ns per entry of the C++ VM over the 14,520 entries captured from real models",
        "(`bench/data/entries.json.gz`), against the reference AST interpreter in the same run.",
        "",
        *vm_table(ns),
        "",
        "Verdict: information only, no current target (a filter runs once per compiled frame: see",
        "the filter's share of compile time).",
        "",
        "## Policy called from Python, per guard entry (`bench/bench_e2e.py`)",
        "",
        "ns per entry of `policy(entries)` on live `GuardFilterEntry` lists, against torch's own filter",
        "(std policies) or a hand-written Python filter with the same decisions (`rules30_python`).",
        "",
        *e2e_tables(e2e),
        f"Verdict: information only, no current target; geometric mean of the ratios: std policies "
        f"{geomean(std):.2f}x, rules30 {geomean(r30):.2f}x.",
        "",
        *startup_lines(startup),
        END,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vm-bench", default=str(ROOT / "build/bench/guardpolicy_vm_bench"))
    ap.add_argument("--out", default=str(ROOT / "bench/DETAILS.md"))
    args = ap.parse_args(argv)
    ns = run_vm(Path(args.vm_bench))
    e2e = run_e2e()
    text = render(ns, e2e, measure_startup(), datetime.date.today().isoformat(),
                  f"{platform.system()} {platform.release()}", os.cpu_count() or 0)
    write_section(Path(args.out), BEGIN, END, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
