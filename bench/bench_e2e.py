"""End-to-end filter cost from Python on real ``GuardFilterEntry`` lists.

For each model below, the entries torch offers to ``guard_filter_fn`` are captured live
(``backend="eager"``, one call under ``torch.no_grad()``, a filter that keeps every guard
and keeps the entry objects) and stay in memory for the whole run. Then, on the same list:

* each standard policy, ``policy(entries)`` (``guardpolicy.load_std``) against torch's own
  ``torch.compiler.<name>_unsafe(entries)``;
* ``bench/policies/rules30.gpol`` (30 rules: guard-type sets, guard-source tests, name
  startswith/contains/endswith/matches, is_global, value.is_parameter/is_buffer,
  source.depth) against ``rules30_python``, a hand-written Python filter with exactly the
  same decisions.

Decisions are checked equal (entry by entry) before anything is timed.

Timing (timeit-style): one *sample* is ``number`` back-to-back calls timed together with
``time.perf_counter_ns``, divided by ``number``; ``number`` is picked per model so that a
sample of the slower side lasts about ``--sample-ms``. The two sides alternate sample by
sample (who goes first alternates too), ``--samples`` samples each, with the garbage
collector off. Reported: the median ns per call and per entry (per call / entries), and
ratio = policy median / torch (or Python) median: below 1 means the policy is faster.

    .venv/bin/python bench/bench_e2e.py [--samples 41] [--sample-ms 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch

import guardpolicy as gp
from guardpolicy.runtime.torch_internals import guard_source_enum
from guardpolicy.tools.common.timing import machine_description
from guardpolicy.tools.common.models import build_gpt2, build_mlp

HERE = os.path.dirname(os.path.abspath(__file__))
RULES30 = os.path.join(HERE, "policies", "rules30.gpol")

# --------------------------------------------------------------------------- models

GLOBAL_SCALE = 3
GLOBAL_CONFIG = {"gain": 2.0, "use_bias": True}
GLOBAL_TABLE = torch.linspace(0.0, 1.0, 16)


def read_globals(x):
    """A plain function reading module-level globals."""
    y = x * GLOBAL_SCALE
    if GLOBAL_CONFIG["use_bias"]:
        y = y + GLOBAL_TABLE
    return y * GLOBAL_CONFIG["gain"]


def _gpt2_large():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=12, n_embd=64, n_head=4, vocab_size=256, n_positions=64,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval(), (torch.randint(0, 256, (1, 16)),), {}


def _bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=128, vocab_size=256, max_position_embeddings=64)
    torch.manual_seed(0)
    ids = torch.randint(0, 256, (1, 16))
    return BertModel(config).eval(), (ids,), {"attention_mask": torch.ones_like(ids)}


MODELS: dict[str, Callable[[], tuple[Any, tuple, dict]]] = {
    "globals_fn": lambda: (read_globals, (torch.randn(4, 16),), {}),
    "mlp": lambda: (*build_mlp(), {}),
    "gpt2-2l": lambda: (*build_gpt2(), {}),
    "bert-4l": _bert,
    "gpt2-12l": _gpt2_large,
}


def capture_live(fn, args, kwargs) -> list:
    """The GuardFilterEntry objects torch offers when compiling ``fn`` (every frame)."""
    live: list = []

    def keep_all(entries):
        live.extend(entries)
        return [True] * len(entries)

    torch.compiler.reset()
    compiled = torch.compile(fn, backend="eager", options={"guard_filter_fn": keep_all})
    with torch.no_grad():
        compiled(*args, **kwargs)
    torch.compiler.reset()
    return live


# --------------------------------------------------------------------------- rules30 in Python

_AMBIENT = frozenset({"GLOBAL_STATE", "SHAPE_ENV", "DEFAULT_DEVICE", "TORCH_FUNCTION_STATE"})
_IMPORT_KINDS = frozenset({"CLOSURE_MATCH", "MODULE_MATCH", "NOT_PRESENT_IN_GENERIC_DICT"})
_TORCH_IMPORT_KINDS = frozenset({"MODULE_MATCH", "BUILTIN_MATCH"})
_CONFIG_DICT_KINDS = frozenset({"DICT_NOT_CONTAINS", "DICT_CONTAINS", "NOT_PRESENT_IN_GENERIC_DICT"})
_SEQ_KINDS = frozenset({"SEQUENCE_LENGTH", "DICT_KEYS_MATCH"})
_ID_KINDS = frozenset({"ID_MATCH", "EQUALS_MATCH", "HASATTR"})
_RE_TORCH_IMPORT = re.compile(r"^G\['__import_torch").search
_RE_DROPOUT = re.compile(r"_modules\['(dropout|drop|attn_dropout|resid_dropout)'\]").search
_RE_CONST = re.compile(r"\.(eps|training|scale_grad_by_freq|inplace)$").search
GuardSource = guard_source_enum()
_LOCAL = GuardSource.LOCAL
_LOCAL_UNSPEC = GuardSource.LOCAL_UNSPECIALIZED_NN_MODULE
_Tensor, _Parameter = torch.Tensor, torch.nn.Parameter


def _depth(e) -> int:
    src, depth = e.orig_guard.originating_source, 0
    while hasattr(src, "base"):
        src, depth = src.base, depth + 1
    return depth


def _is_param(e) -> bool:
    return e.has_value and isinstance(e.value, _Parameter)


def _is_buffer(e) -> bool:
    if not e.has_value:
        return False
    v = e.value
    if not isinstance(v, _Tensor) or isinstance(v, _Parameter):
        return False
    src = e.orig_guard.originating_source
    while hasattr(src, "base"):
        if getattr(src, "member", None) == "_buffers":
            return True
        src = src.base
    return False


def _rules30_decide(e) -> bool:
    gt = e.guard_type
    if gt in _AMBIENT:
        return True
    gs = e.orig_guard.source
    if gt == "TENSOR_MATCH" and gs is _LOCAL:
        return True
    if gt == "DUPLICATE_INPUT":
        return True
    is_global = e.is_global
    if gt == "CLASS_MATCH" and is_global and _depth(e) >= 2:
        return False
    if gt == "AUTOGRAD_SAVED_TENSORS_HOOKS" and not is_global:
        return False
    name = e.name
    if gt == "EMPTY_NN_MODULE_HOOKS_DICT":
        if name.endswith("_backward_hooks") or "pre_hooks" in name:
            return False
        return _depth(e) <= 4
    if gs.is_unspecialized_builtin_nn_module() and _is_param(e):
        return False
    if _is_buffer(e):
        return True
    if gt == "TENSOR_MATCH":
        return not (_is_param(e) and _depth(e) >= 10)
    if name.startswith("G['__import_transformers") and gt in _IMPORT_KINDS:
        return False
    if name.startswith("G['__builtins_dict__"):
        return False
    if gt in _TORCH_IMPORT_KINDS and _RE_TORCH_IMPORT(name):
        return False
    if is_global:
        if gt == "CONSTANT_MATCH":
            return True
        if _depth(e) >= 3:
            return False
    if ".config" in name:
        if gt in _CONFIG_DICT_KINDS:
            return False
        if gt == "CONSTANT_MATCH":
            return True
    if _RE_DROPOUT(name):
        return False
    if gt == "NOT_PRESENT_IN_GENERIC_DICT" and gs.is_unspecialized_nn_module():
        return False
    if gt == "TYPE_MATCH":
        if name.endswith("._parameters") or name.endswith("._buffers"):
            return False
        if _depth(e) < 2:
            return True
        return gs is not _LOCAL_UNSPEC
    if gt in _SEQ_KINDS and gs is _LOCAL:
        return True
    if gt == "CONSTANT_MATCH" and _RE_CONST(name):
        return False
    if gt == "CLOSURE_MATCH" and is_global:
        return False
    return True  # rule 30 keeps, and so does the default


def rules30_python(entries) -> list[bool]:
    """bench/policies/rules30.gpol, written by hand as a guard_filter_fn."""
    return [_rules30_decide(e) for e in entries]


# --------------------------------------------------------------------------- timing


def _sample(fn, entries, number: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(number):
        fn(entries)
    return (time.perf_counter_ns() - t0) / number


def _pick_number(fns, entries, sample_ms: float) -> int:
    """Calls per sample so that the slower function's sample lasts about sample_ms."""
    slowest = 0.0
    for fn in fns:
        fn(entries)
        number = 1
        while True:
            t = _sample(fn, entries, number) * number
            if t >= 2e5 or number >= 1 << 16:
                break
            number *= 2
        slowest = max(slowest, t / number)
    return max(1, int(sample_ms * 1e6 / max(slowest, 1.0)))


def compare(ours, theirs, entries, samples: int, sample_ms: float) -> dict[str, Any]:
    number = _pick_number((ours, theirs), entries, sample_ms)
    for _ in range(3):  # warm-up
        _sample(ours, entries, number)
        _sample(theirs, entries, number)
    a, b = [], []
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(samples):
            if i % 2 == 0:
                a.append(_sample(ours, entries, number))
                b.append(_sample(theirs, entries, number))
            else:
                b.append(_sample(theirs, entries, number))
                a.append(_sample(ours, entries, number))
    finally:
        if was_enabled:
            gc.enable()
    n = len(entries)
    ours_ns, theirs_ns = statistics.median(a), statistics.median(b)
    return {
        "entries": n,
        "number": number,
        "samples": samples,
        "policy_ns_per_call": ours_ns,
        "ref_ns_per_call": theirs_ns,
        "policy_ns_per_entry": ours_ns / n,
        "ref_ns_per_entry": theirs_ns / n,
        "ratio": ours_ns / theirs_ns,
        "policy_ns_min": min(a),
        "ref_ns_min": min(b),
    }


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=41, help="timed samples per side (default 41)")
    parser.add_argument("--sample-ms", type=float, default=2.0, help="target ms per sample (default 2)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated from {','.join(MODELS)}")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    t_start = time.perf_counter()

    live: dict[str, list] = {}
    for name in models:
        fn, fargs, fkwargs = MODELS[name]()
        live[name] = capture_live(fn, fargs, fkwargs)

    std = {name: gp.load_std(name) for name in gp.STD_POLICIES}
    rules30 = gp.load(RULES30)
    pairs: list[tuple[str, Callable, Callable, str]] = [
        (name, std[name], getattr(torch.compiler, f"{name}_unsafe"), f"torch.compiler.{name}_unsafe")
        for name in gp.STD_POLICIES
    ]
    pairs.append(("rules30", rules30, rules30_python, "rules30_python"))

    # Same decisions, entry by entry, before any timing.
    for model, entries in live.items():
        for label, ours, theirs, ref in pairs:
            a, b = ours(entries), list(theirs(entries))
            bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
            if len(a) != len(b) or bad:
                e = entries[bad[0]] if bad else None
                print(f"MISMATCH {model}/{label} vs {ref}: {len(bad)} entries, first "
                      f"{e.guard_type if e else ''} {e.name if e else ''!r}", file=sys.stderr)
                return 1

    results = []
    header = (f"{machine_description()} | "
              f"{args.samples} interleaved samples per side, ~{args.sample_ms:g} ms each, GC off")
    print(header)
    cols = ["model", "entries", "policy", "reference", "policy ns/call", "ref ns/call",
            "policy ns/entry", "ref ns/entry", "policy/ref"]
    rows = []
    for model, entries in live.items():
        for label, ours, theirs, ref in pairs:
            r = compare(ours, theirs, entries, args.samples, args.sample_ms)
            r.update(model=model, policy=label, reference=ref,
                     dropped=sum(1 for k in ours(entries) if not k))
            results.append(r)
            rows.append([model, str(r["entries"]), label, ref, f"{r['policy_ns_per_call']:.0f}",
                         f"{r['ref_ns_per_call']:.0f}", f"{r['policy_ns_per_entry']:.1f}",
                         f"{r['ref_ns_per_entry']:.1f}", f"{r['ratio']:.2f}x"])
            print(f"  {model}/{label}: {r['ratio']:.2f}x", file=sys.stderr, flush=True)
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    left = {0, 2, 3}

    def line(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(cols))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))

    def gmean(xs):
        xs = list(xs)
        return float(statistics.geometric_mean(xs)) if xs else float("nan")

    print()
    std_ratios = [r["ratio"] for r in results if r["policy"] != "rules30"]
    r30 = [r["ratio"] for r in results if r["policy"] == "rules30"]
    print(f"geometric mean policy/ref: std policies {gmean(std_ratios):.2f}x "
          f"(min {min(std_ratios):.2f}x, max {max(std_ratios):.2f}x); "
          f"rules30 vs hand-written Python {gmean(r30):.2f}x")
    print("ns/call: median over samples of one policy(entries) call; ns/entry = ns/call / entries; "
          "ratio < 1: the policy is faster. Decisions checked equal before timing.")
    elapsed = time.perf_counter() - t_start
    print(f"total {elapsed:.1f} s")
    if args.json:
        report = {
            "torch": torch.__version__,
            "machine": machine_description(),
            "python": platform.python_version(),
            "samples": args.samples,
            "sample_ms": args.sample_ms,
            "policy_fields": {label: list(p.fields) for label, p, _, _ in pairs},
            "units": "ns per call / per entry, medians; ratio = policy / reference",
            "results": results,
            "wall_s": elapsed,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
