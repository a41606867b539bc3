#!/usr/bin/env python3
"""The safe setting against torch's zero-guard floor, per call: the suggested policy with
every guard it keeps checked on every call, against the same policy watching what it can
(``default watch``, docs/design-notes/watch.md), both with ``verify every 100 calls`` and
``dispatch direct``, on the demo models (MLP, GPT-2) and Inductor.

Per model: ``gp.suggest`` (Inductor audit) writes the policy once; then one interleaved run
(``guardpolicy.tools.latency``) times ``torch.compile`` with no filter, the suggested policy
with its ``default watch`` read as ``default keep`` (every kept guard checked per call: the
safe setting before watching), the suggested policy as written (watching) and the zero-guard
floor (``skip_all_guards`` + free tensors + the ``skip_guard_eval_unsafe`` stance), each
through ``gp.compile``. ``--instructions`` also counts instructions per call under callgrind
(bench/callgrind.py), the measure that decides on this machine. Prints markdown;
``--results bench/DETAILS.md`` writes its section there.

``--decode-instructions N`` counts the HF Llama decode step too (bench_llama_suggest.py's).

Usage: bench_watch.py [--models mlp,gpt2] [--calls 600] [--block 20] [--instructions 300]
                      [--decode-instructions 100] [--results bench/DETAILS.md]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
from results_section import counted_parser, publish, recorded

import callgrind
import guardpolicy as gp
from guardpolicy.tools import latency
from guardpolicy.tools.common.models import build

ROOT = Path(__file__).resolve().parents[1]

BEGIN = "<!-- watch: begin (bench/bench_watch.py writes this section) -->"
END = "<!-- watch: end -->"
CHECKED = "suggested, every kept guard checked (+ verify + direct)"
WATCHED = "suggested with watch (+ verify + direct)"
FLOOR = "zero-guard floor (all +ift +stance)"
TARGET = 1.05  # the watched setting at most this times the floor


def with_direct(text: str) -> str:
    """The suggested policy with ``dispatch direct`` (before its ``default`` line)."""
    return re.sub(r"^  default ", "  dispatch direct\n  default ", text, count=1, flags=re.M)


def variants(policies: dict[str, str] | str):
    """The ``make`` of ``latency``/``callgrind``: ``policies`` maps a model's class name to
    its suggested policy text (with ``dispatch direct``), or is a JSON file holding that map
    (callgrind's child takes its arguments on the command line)."""
    if isinstance(policies, str):
        policies = json.loads(Path(policies).read_text(encoding="utf-8"))

    def make(model, inputs: tuple, backend: str) -> list[latency.Variant]:
        text = policies[type(model).__name__]
        out = [latency.no_filter(model, inputs, backend)]
        floor = latency.RECIPES[-1].policy_source()
        for label, source in ((CHECKED, text.replace("  default watch", "  default keep")), (WATCHED, text),
                              (FLOOR, floor)):
            fn = latency.gp_compile(latency.own_copy(model), gp.load(source), backend=backend)
            fn(*inputs)
            out.append(latency.Variant(label, fn))
        return out

    return make


def decode_variants(text: str):  # text: the policy, or a file holding it
    """The ``make`` of ``callgrind`` for the HF Llama decode step (bench_llama_suggest's
    model, tests/python/models/llama_model.py): the model and inputs it is given (the MLP's:
    callgrind builds a demo model) are ignored; each variant's call is one decode step with the
    cache's write position rewound first. ``text``: the suggested policy (``dispatch direct``)."""

    if Path(text).is_file():
        text = Path(text).read_text(encoding="utf-8")

    def make(_model, _inputs: tuple, backend: str) -> list[latency.Variant]:
        from bench_llama_suggest import rewound

        from guardpolicy.tools.common import model_spec
        from guardpolicy.tools.decode import cache_keyword

        b = model_spec.resolve(str(ROOT / "tests/python/models/llama_model.py")).build()
        cache = b.kwargs[cache_keyword(b.fn)]
        length = int(cache.layers[0].cumulative_length)

        def step(fn):
            call = rewound(fn, cache, length)
            return lambda *_: call(**b.kwargs)

        out = [latency.Variant("eager", step(b.fn))]
        for label, source in ((CHECKED, text.replace("  default watch", "  default keep")), (WATCHED, text),
                              (FLOOR, latency.RECIPES[-1].policy_source())):
            fn = latency.gp_compile(latency.own_copy(b.fn), gp.load(source), backend=backend)
            out.append(latency.Variant(label, step(fn)))
        return out

    return make


def decode_text() -> str:
    from guardpolicy.tools.common import model_spec

    b = model_spec.resolve(str(ROOT / "tests/python/models/llama_model.py")).build()
    return with_direct(gp.suggest(b.fn, *b.args, backend="inductor", **b.kwargs).text)


def text_file(text: str) -> str:
    """A temporary file holding ``text`` (removed at exit), for callgrind's child."""
    import atexit
    import os
    import tempfile

    fd, path = tempfile.mkstemp(prefix="gp-bench-watch-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    atexit.register(lambda: os.path.exists(path) and os.remove(path))
    return path


def suggested(names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        model, inputs = build(name)
        s = gp.suggest(model, *inputs, backend="inductor")
        out[type(model).__name__] = with_direct(s.text)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = counted_parser(__doc__, ("--models", "mlp,gpt2"), calls=600, instructions=300)
    parser.add_argument("--decode-instructions", type=int, default=0,
                        help="also count the HF Llama decode step's instructions, this many calls per variant")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    names = args.models.split(",")
    policies = suggested(names)
    tables = latency.measure(variants(policies), names, ["inductor"], args.calls, args.block,
                             progress=lambda m: print(m, file=sys.stderr))
    counts = {}
    if args.instructions:
        runs = [(name, "inductor") for name in names]
        counts = callgrind.count_runs("bench_watch", "variants", [text_file(json.dumps(policies))], runs,
                                      args.instructions)
    if args.decode_instructions:
        print("the HF Llama decode step: counting instructions", file=sys.stderr)
        counts[("decode", "inductor")] = callgrind.count("bench_watch", "decode_variants", [text_file(decode_text())],
                                                         "mlp", "inductor", args.decode_instructions)
    lines = [recorded(latency.machine(), "Inductor", args), ""]
    verdicts = []
    for name in names:
        rows = tables[f"{name}, inductor"]
        floor = next(r["median_us"] for r in rows if r["variant"] == FLOOR)
        count = counts.get((name, "inductor"), {})
        lines += [f"**{name}**", "", "| variant | median µs | p90 µs | / no filter | / zero-guard floor |"
                  + (" instructions per call | instructions / floor |" if count else ""),
                  "|---|---:|---:|---:|---:|" + ("---:|---:|" if count else "")]
        for r in rows:
            cells = [r["variant"], f"{r['median_us']:.1f}", f"{r['p90_us']:.1f}", f"{r['vs_no_filter']:.2f}",
                     f"{r['median_us'] / floor:.2f}"]
            if count:
                n = count.get(r["variant"])
                cells += [f"{n:,.0f}", f"{n / count[FLOOR]:.3f}"] if n is not None else ["", ""]
            lines.append("| " + " | ".join(cells) + " |")
        watched = next(r["median_us"] for r in rows if r["variant"] == WATCHED) / floor
        ratio = count[WATCHED] / count[FLOOR] if count else None
        verdicts.append((name, watched, ratio))
        lines.append("")
    decode = counts.get(("decode", "inductor"))
    if decode:
        lines += ["**HF Llama decode step** (instructions only; wall clock: bench_llama_suggest.py)", "",
                  "| variant | instructions per call | instructions / floor |", "|---|---:|---:|"]
        lines += [f"| {label} | {n:,.0f} | {n / decode[FLOOR]:.3f} |" for label, n in decode.items()]
        lines.append("")
        verdicts.append(("decode step", float("nan"), decode[WATCHED] / decode[FLOOR]))
    met = all((r if r is not None else w) <= TARGET for _, w, r in verdicts)
    lines.append(f"Target: {WATCHED} at most {TARGET}× the zero-guard floor (instruction counts decide where "
                 f"measured): **{'met' if met else 'not met'}** ("
                 + "; ".join((f"{n} {w:.2f}× wall clock" if w == w else n)
                             + (f", {r:.3f}× instructions" if r else "") for n, w, r in verdicts) + ").")
    publish("\n".join(lines), args.results, BEGIN, END,
            "The safe setting against the zero-guard floor (`bench/bench_watch.py`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
