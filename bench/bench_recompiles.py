#!/usr/bin/env python3
"""What ``python -m guardpolicy recompiles`` costs: wall time and peak memory on the demo's
GPT-2 with a storm injected (bench/storms/gpt2_options.py: a request id per call), against
``python -m guardpolicy suggest`` on the same model and backend, each in a fresh process
(its own peak resident set, ``ru_maxrss``), run one after the other.

Usage: bench_recompiles.py [--backend eager] [--repeat 1]
Prints a markdown table; bench/RESULTS.md keeps the recorded run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STORM = os.path.join(HERE, "storms", "gpt2_options.py")

#: Runs guardpolicy's CLI in this process, then prints its wall time and peak RSS (MiB) as JSON.
_CHILD = """
import json, resource, sys, time
from guardpolicy.cli import main
t0 = time.perf_counter()
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "s": time.perf_counter() - t0,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, timeout=3600,
                          cwd=HERE)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"{args[0]} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--repeat", type=int, default=1)
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(opts.repeat):
            rows.append(("recompiles", measure(["recompiles", "--model", STORM, "--run", STORM, "-q", "--backend",
                                                opts.backend, "-o", os.path.join(tmp, "fix.gpol"), "--force"])))
            rows.append(("suggest", measure(["suggest", "--model", STORM, "-q", "--backend", opts.backend,
                                             "--bench-backends", "", "-o", os.path.join(tmp, "s.gpol"), "--force"])))
    import torch

    print(f"Recorded {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, torch {torch.__version__}, backend {opts.backend}.\n")
    print("| command | exit | wall s | peak MiB |\n|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['rc']} | {r['s']:.1f} | {r['peak_mib']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
