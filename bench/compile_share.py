#!/usr/bin/env python3
"""The guard filter's share of compile time: what a policy costs a user of torch.compile.

``guard_filter_fn`` runs once per compiled frame (Dynamo calls it while it builds the
frame's guards), not once per call of the compiled function, so what counts is the time
the policy takes inside a compile, as a share of that compile. For each model below and
each policy (the six std policies, ``bench/policies/rules30.gpol`` and
``bench/policies/paths.gpol``, which reads ``path`` and ``module_path``):

* ``torch.compiler.reset()``, then ``torch.compile(model, backend="eager",
  options={"guard_filter_fn": timed(policy)})`` and one call under ``torch.no_grad()``;
* compile time = the wall time of that first call (Dynamo traces, builds guards, runs the
  filter, compiles); filter time = the time spent inside ``policy(entries)``, summed over
  every frame of the compile (``timed`` wraps the policy with ``time.perf_counter_ns``);
* share = filter time / compile time, the median of ``--repeats`` compiles.

``backend="eager"`` is the cheapest compile there is (no Inductor, no code generation), so
these shares are upper bounds: with the default backend the same filter time is divided by
a compile several times longer. One warm-up compile per model runs first (imports, caches),
not counted.

    .venv/bin/python bench/compile_share.py [--repeats 3] [--json OUT]
        [--results bench/DETAILS.md --before bench/data/compile_share_before.json]

``--results`` writes (or replaces) the section between the markers below in that file,
with the numbers of this run ("after") beside those of ``--before`` (a ``--json`` output of
an earlier tree), the date and the machine. Target: every share at most 1%.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from results_section import md_head, md_row, met, write_section

import guardpolicy as gp
from guardpolicy.tools.common.models import build_gpt2, build_mlp
from guardpolicy.tools.common.timing import machine_description

HERE = Path(__file__).resolve().parent
RULES30 = HERE / "policies" / "rules30.gpol"
PATHS = HERE / "policies" / "paths.gpol"  # reads `path` and `module_path`
TARGET = 0.01  # at most 1% of a compile
BEGIN = "<!-- compile-share: begin (bench/compile_share.py writes this section) -->"
END = "<!-- compile-share: end -->"


def build_gpt2_12l() -> tuple[Any, tuple]:
    """build_gpt2's model with 12 layers instead of 2 (GPT-2 small's depth)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=12, n_embd=64, n_head=4, vocab_size=256, n_positions=64,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval(), (torch.randint(0, 256, (1, 16)),)


#: The demo models (guardpolicy.tools.common.models.DEMO_MODELS) and a 12-layer GPT-2.
MODELS: dict[str, Callable[[], tuple[Any, tuple]]] = {
    "mlp": build_mlp,
    "gpt2": build_gpt2,
    "gpt2-12l": build_gpt2_12l,
}

STD = ("skip_guard_on_inbuilt_nn_modules", "skip_guard_on_all_nn_modules", "keep_tensor_guards",
       "skip_guard_on_globals", "keep_portable_guards", "skip_all_guards")


def policies() -> dict[str, gp.Policy]:
    out = {name: gp.load_std(name) for name in STD}
    out["rules30"] = gp.load(str(RULES30))
    out["paths"] = gp.load(str(PATHS))
    return out


class Timed:
    """``policy`` as guard_filter_fn, adding up the time spent in it and the entries seen."""

    def __init__(self, policy: Callable[[list], list[bool]]):
        self.policy = policy
        self.ns = 0
        self.entries = 0
        self.calls = 0

    def __call__(self, entries):
        t0 = time.perf_counter_ns()
        out = self.policy(entries)
        self.ns += time.perf_counter_ns() - t0
        self.entries += len(entries)
        self.calls += 1
        return out


def compile_once(model: Any, inputs: tuple, policy: Callable) -> tuple[int, Timed]:
    """(compile ns, the timed filter) of one fresh compile of ``model``."""
    torch.compiler.reset()
    timed = Timed(policy)
    compiled = torch.compile(model, backend="eager", options={"guard_filter_fn": timed})
    gc.collect()
    t0 = time.perf_counter_ns()
    with torch.no_grad():
        compiled(*inputs)
    total = time.perf_counter_ns() - t0
    torch.compiler.reset()
    return total, timed


def measure(repeats: int) -> list[dict]:
    results = []
    pols = policies()
    for model_name, build in MODELS.items():
        model, inputs = build()
        compile_once(model, inputs, lambda entries: [True] * len(entries))  # warm-up
        for policy_name, policy in pols.items():
            runs = [compile_once(model, inputs, policy) for _ in range(repeats)]
            shares = [t.ns / total for total, t in runs]
            k = sorted(range(repeats), key=lambda i: shares[i])[repeats // 2]  # the median run
            total, timed = runs[k]
            results.append({
                "model": model_name, "policy": policy_name, "frames": timed.calls,
                "entries": timed.entries, "compile_ms": total / 1e6, "filter_ms": timed.ns / 1e6,
                "share": statistics.median(shares),
            })
            print(f"{model_name:9} {policy_name:34} {timed.entries:5} entries  compile {total / 1e6:8.1f} ms  "
                  f"filter {timed.ns / 1e6:6.3f} ms  share {100 * results[-1]['share']:.3f}%", flush=True)
    return results


def model_heading(rows: list[dict]) -> str:
    """``**mlp** (1 frame, 258 guard entries)``: a model's frames and entries, from its first row."""
    frames, entries = rows[0]["frames"], rows[0]["entries"]
    return f"**{rows[0]['model']}** ({frames} frame{'' if frames == 1 else 's'}, {entries} guard entries)"


def recorded(after: dict, before: dict | None) -> list[str]:
    """The intro's last lines: when and where each run was recorded, and which policies the
    before run lacks."""
    if before is None:
        return [f"after: the public C API only. Recorded {after['date']} on {after['machine']}; no before run.", ""]
    both = before["date"] == after["date"] and before["machine"] == after["machine"]
    lines = (["after: the public C API only. Both recorded", f"{after['date']} on {after['machine']}."] if both else
             ["after: the public C API only. Before recorded", f"{before['date']} on {before['machine']}; after recorded "
              f"{after['date']} on {after['machine']}."])
    seen = {r["policy"] for r in before["results"]}
    missing = list(dict.fromkeys(r["policy"] for r in after["results"] if r["policy"] not in seen))
    if missing:
        names = " and ".join(f"`{p}`" for p in missing)
        lines.append(f"`-`: {names} {'was' if len(missing) == 1 else 'were'} not in the before run.")
    return lines


def render(after: dict, before: dict | None = None) -> str:
    """The compile-share section of DETAILS.md from this run (``after``: date, machine,
    repeats, results) and an earlier tree's (``before``: the same, and ``tree``; None: not
    recorded): per model, each policy's compile ms, filter ms and share (%), before and after."""
    prior = {(r["model"], r["policy"]): r for r in (before or {}).get("results", [])}
    worst = max(after["results"], key=lambda r: r["share"])
    tree = f" ({before['tree']})" if before and before.get("tree") else ""
    intro = recorded(after, before)
    lines = [
        BEGIN,
        "## Filter share of compile time (`bench/compile_share.py`)",
        "",
        "Time inside `policy(entries)` as a share of the first call of `torch.compile(model, backend=\"eager\")`",
        f"(median of {after['repeats']} compiles; eager is the cheapest backend, so these are upper bounds). "
        "Before: the binding",
        f"with its CPython-internal fast paths{tree}; {intro[0]}",
        *intro[1:],
        "",
    ]
    models = list(dict.fromkeys(r["model"] for r in after["results"]))
    for model in models:
        rows = [r for r in after["results"] if r["model"] == model]
        lines += [model_heading(rows), "",
                  *md_head(["policy", "compile before (ms)", "compile after (ms)", "filter before (ms)",
                            "filter after (ms)", "share before", "share after"])]
        for r in rows:
            b = prior.get((r["model"], r["policy"]))
            lines.append(md_row([r["policy"], f"{b['compile_ms']:.0f}" if b else "-", f"{r['compile_ms']:.0f}",
                                 f"{b['filter_ms']:.3f}" if b else "-", f"{r['filter_ms']:.3f}",
                                 f"{100 * b['share']:.3f}%" if b else "-", f"{100 * r['share']:.3f}%"]))
        lines.append("")
    was = f"; before: {100 * max(r['share'] for r in prior.values()):.3f}%" if prior else ""
    lines += [
        f"Target: every share at most {100 * TARGET:.0f}%: **{met(worst['share'] <= TARGET)}** (largest "
        f"{100 * worst['share']:.3f}%, {worst['policy']} on {worst['model']}{was}).",
        END,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write this run's numbers here")
    ap.add_argument("--tree", default="", help="what tree this run measures (kept in --json)")
    ap.add_argument("--results", help="the DETAILS.md whose compile-share section to write")
    ap.add_argument("--before", help="a --json output of the tree to compare with")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    run = {"date": datetime.date.today().isoformat(), "machine": machine_description(), "repeats": args.repeats,
           "tree": args.tree, "results": measure(args.repeats)}
    if args.json:
        Path(args.json).write_text(json.dumps(run, indent=1) + "\n")
    if args.results:
        before = json.loads(Path(args.before).read_text()) if args.before else None
        write_section(Path(args.results), BEGIN, END, render(run, before))
        print(f"wrote the compile-share section of {args.results}")
    worst = max(r["share"] for r in run["results"])
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
