#!/usr/bin/env python3
"""Refreshes the measured tables of docs/cookbook.md from one bench run's JSON.

    refresh_cookbook.py BENCH.json BENCH.txt [docs/cookbook.md]

BENCH.json and BENCH.txt are what ``python -m guardpolicy bench ... --json BENCH.json``
wrote and printed (the command is in the page). Every table row of the page whose first
two cells name a model and a variant of the run is rewritten with that run's numbers; the
```text block under "## The full run" becomes BENCH.txt. A row naming a variant the run
does not have is an error (the page and the bench disagree).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HEADER = "| model | variant | via | kept / offered | tree | guard µs | warm µs | median µs | p90 µs | vs base |"


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _row(model: str, r: dict) -> str:
    tree = "-" if r["tree_guards"] is None else str(r["tree_guards"])
    if r.get("run_tree_guards") is not None and r["run_tree_guards"] != r["tree_guards"]:
        tree = f"{r['tree_guards']}>{r['run_tree_guards']}"
    kept = "-" if r["offered"] is None else f"{r['kept']} / {r['offered']}"
    return (f"| {model} | `{r['name']}` | {r['via']} | {kept} | {tree} | {_num(r['guard_eval_us'], 1)} | "
            f"{_num(r['guard_check_us'], 2)} | {_num(r['median_us'], 1)} | {_num(r['p90_us'], 1)} | "
            f"{_num(r['vs_baseline'], 2)}x |")


def refresh(page: str, report: dict, text: str) -> str:
    rows = {(m, r["name"]): r for m, rs in report["models"].items() for r in rs}
    out, in_table = [], False
    for line in page.splitlines():
        if line == HEADER:
            in_table = True
        elif in_table and line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            key = (cells[0], cells[1].strip("`"))
            if key not in rows:
                raise SystemExit(f"cookbook row {key} is not in the bench run")
            line = _row(key[0], rows[key])
        elif not line.startswith("|"):
            in_table = False
        out.append(line)
    page = "\n".join(out) + "\n"
    full = page.index("## The full run")
    start = page.index("```text\n", full) + len("```text\n")
    end = page.index("```\n", start)
    return page[:start] + text.rstrip("\n") + "\n" + page[end:]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    page = Path(argv[2] if len(argv) == 3 else "docs/cookbook.md")
    report = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    text = Path(argv[1]).read_text(encoding="utf-8")
    page.write_text(refresh(page.read_text(encoding="utf-8"), report, text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
