"""``python -m guardpolicy demo`` (what ``make demo`` runs): guard counts and per-call
latency of small real models compiled under each standard policy.

For each model (``guardpolicy._models``: an MLP with LayerNorm, a small random GPT-2) it
measures

* eager (no ``torch.compile``),
* ``torch.compile(model, backend=<eager>)`` with no ``guard_filter_fn`` (the baseline),
* the same once per ``guardpolicy.STD_POLICIES`` policy passed as ``guard_filter_fn``,

and prints per variant: the guards offered to the filter, kept and dropped (summed over
every frame Dynamo compiled), the guards left in the final guard-manager tree, the median
and p90 per-call latency in µs, the ratios against the no-policy baseline and against eager,
and whether the compiled output equals eager's.

How the numbers are obtained
----------------------------
Phase 1 (counts, one variant at a time): ``torch._dynamo.reset()``, compile, one call
under ``torch.no_grad()``. A recorder around the policy sums offered/kept/dropped over its
calls (torch calls the filter once per compiled frame). The baseline has no filter; its
"offered" is ``CompilationMetrics.guard_count`` (the pre-filter guard count Dynamo records
per frame) and it keeps all of them. Tree guards are counted by walking the guard-manager
tree of every cache entry on ``type(model).forward``
(``torch._dynamo.eval_frame._debug_get_cache_entry_list``): leaf guards (shared relational
guards counted once) plus the root's epilogue lambda guards.

Phase 2 (latency, all variants alive together): one ``torch._dynamo.reset()``, every
variant compiled again, warm-up calls, then ``--calls`` timed calls per variant,
round-robin in blocks of ``--block`` calls so that machine noise hits every variant alike.
Each call is timed alone with ``time.perf_counter_ns``. Phase 2 re-checks that every
policy was offered and kept the same guards as in phase 1, that nothing recompiled while
timing, and that each variant still matches eager.

Two details of torch 2.13 shape phase 2:

* Compiled variants of one model share one code object and so one cache-entry list, and
  Dynamo matches a cache entry to a call by backend *equality*. Two ``torch.compile(...,
  backend="eager")`` wrappers compare equal (``_TorchCompileWrapper.__eq__`` compares the
  compiler function and kwargs, not the ``guard_filter_fn``), so the second variant would
  silently run the first one's compiled code. Each variant therefore gets its own backend
  function that just calls the registered ``"eager"`` backend: the same compiled code,
  distinct cache entries.
* The cache-entry list is most-recently-used first and lookup compares backends in order,
  so the first call after switching variants pays one backend comparison per other
  variant. Each block therefore starts with one untimed call that brings the variant's
  entry to the front; the timed calls then measure what a single compiled model would pay.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import STD_POLICIES, load_std
from ._models import MODEL_NAMES, build, output_tensor

EAGER = "eager"
NO_POLICY = "no policy"


# --------------------------------------------------------------------------- recording


class RecordingFilter:
    """A ``guard_filter_fn`` that forwards to ``policy`` and counts what it decided.

    ``frames``: filter calls (torch makes one per compiled frame); ``offered``: guard
    entries passed in, summed over frames; ``kept``/``dropped``: ``True``/``False``
    decisions, summed over frames. All counts are plain guard counts.
    """

    def __init__(self, policy: Callable[[Any], Any]):
        self.policy = policy
        self.frames = 0
        self.offered = 0
        self.kept = 0

    @property
    def dropped(self) -> int:
        return self.offered - self.kept

    def __call__(self, entries):
        decisions = self.policy(entries)
        if len(decisions) != len(entries):
            raise AssertionError(f"policy returned {len(decisions)} decisions for {len(entries)} guards")
        self.frames += 1
        self.offered += len(entries)
        self.kept += sum(1 for d in decisions if d is True)
        return decisions


def _tagged_eager_backend(tag: str) -> Callable:
    """A backend function distinct per variant (see the module docstring) that calls the
    registered ``"eager"`` backend, so the compiled code is exactly ``backend="eager"``'s."""
    from torch._dynamo import lookup_backend

    eager = lookup_backend("eager")

    def backend(gm, example_inputs, **kwargs):
        return eager(gm, example_inputs, **kwargs)

    backend.__name__ = backend.__qualname__ = f"eager_{tag}"
    return backend


def _backend_tag(cache_entry) -> str | None:
    """The variant tag of a cache entry made by ``_tagged_eager_backend``, else None."""
    fn = getattr(getattr(cache_entry, "backend", None), "compiler_fn", None)
    name = getattr(fn, "__name__", "")
    return name[len("eager_"):] if name.startswith("eager_") else None


# --------------------------------------------------------------------------- guard trees


def _tree_api_available() -> bool:
    """Whether torch exposes what ``count_tree_guards`` needs (checked, not assumed)."""
    try:
        from torch._C._dynamo import guards as g
        from torch._dynamo import eval_frame
    except ImportError:
        return False
    return (
        hasattr(eval_frame, "_debug_get_cache_entry_list")
        and all(hasattr(g.GuardManager, m) for m in ("get_leaf_guards", "get_child_managers"))
        and hasattr(g, "RootGuardManager")
    )


def count_tree_guards(guard_manager) -> int:
    """Guards in one compiled frame's final guard-manager tree (a count).

    ``guard_manager`` is a cache entry's ``GuardManagerWrapper`` (or its ``root``). Walks
    ``get_child_managers()`` and dict key/value managers from the root and counts every
    leaf guard once (relational guards hang under several managers and are deduplicated by
    identity), plus the root's epilogue lambda guards (shape-env and aliasing lambdas).
    """
    root = getattr(guard_manager, "root", guard_manager)
    alive: list[Any] = []  # keep the wrappers alive so id() stays unique during the walk
    seen_managers: set[int] = set()
    seen_leaves: set[int] = set()
    pending = [root]
    while pending:
        manager = pending.pop()
        alive.append(manager)
        if id(manager) in seen_managers:
            continue
        seen_managers.add(id(manager))
        for leaf in manager.get_leaf_guards():
            alive.append(leaf)
            seen_leaves.add(id(leaf))
        pending.extend(manager.get_child_managers())
        if hasattr(manager, "get_key_value_managers"):
            for key_mgr, value_mgr in manager.get_key_value_managers().values():
                pending.extend(m for m in (key_mgr, value_mgr) if m is not None)
    epilogue = root.get_epilogue_lambda_guards() if hasattr(root, "get_epilogue_lambda_guards") else []
    return len(seen_leaves) + len(epilogue)


def _cache_entries(model) -> list:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return list(_debug_get_cache_entry_list(type(model).forward))


# --------------------------------------------------------------------------- variants


@dataclass
class Variant:
    """One row of the table. Counts are guards (summed over compiled frames); latencies
    are per call in µs; ratios are medians divided by the baseline's / eager's median."""

    name: str
    policy: str | None  # None for eager and for the no-policy baseline
    compiled: bool
    frames: int | None = None
    offered: int | None = None
    kept: int | None = None
    dropped: int | None = None
    tree_guards: int | None = None
    compile_s: float | None = None
    median_us: float | None = None
    p90_us: float | None = None
    vs_no_policy: float | None = None
    vs_eager: float | None = None
    matches_eager: bool | None = None
    problems: list[str] = field(default_factory=list)
    # runtime state, not reported
    fn: Any = field(default=None, repr=False)
    recorder: Any = field(default=None, repr=False)
    samples_ns: list[int] = field(default_factory=list, repr=False)


def _compile(model, variant: Variant):
    """``torch.compile`` for ``variant`` with a fresh options dict (torch pops
    ``guard_filter_fn`` from it) and, for a policy, a fresh recorder around a freshly
    loaded policy. Returns ``(compiled, recorder or None)``."""
    import torch

    options: dict[str, Any] = {}
    recorder = None
    if variant.policy is not None:
        recorder = RecordingFilter(load_std(variant.policy))
        options["guard_filter_fn"] = recorder
    tag = variant.policy or "none"
    return torch.compile(model, backend=_tagged_eager_backend(tag), options=options), recorder


def _same(out, ref) -> bool:
    import torch

    out, ref = output_tensor(out), output_tensor(ref)
    return out.shape == ref.shape and bool(torch.allclose(out, ref))


def _phase1_counts(model, inputs, ref, variants: list[Variant], tree_api: bool) -> None:
    """Per compiled variant, in isolation: reset, compile, one call; fills frames, offered,
    kept, dropped, tree_guards, compile_s, matches_eager."""
    import torch
    from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics

    for v in variants:
        if not v.compiled:
            continue
        torch._dynamo.reset()
        clear_compilation_metrics()
        fn, recorder = _compile(model, v)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = fn(*inputs)
        v.compile_s = time.perf_counter() - t0
        v.matches_eager = _same(out, ref)
        metrics = [m for m in get_compilation_metrics() if getattr(m, "guard_count", None) is not None]
        pre_filter = sum(m.guard_count for m in metrics)
        if recorder is not None:
            v.frames, v.offered, v.kept = recorder.frames, recorder.offered, recorder.kept
            v.dropped = recorder.dropped
            if metrics and pre_filter != recorder.offered:
                v.problems.append(f"filter was offered {recorder.offered} guards, Dynamo recorded {pre_filter}")
        else:
            v.frames, v.offered, v.kept, v.dropped = len(metrics), pre_filter, pre_filter, 0
        if tree_api:
            entries = _cache_entries(model)
            # every entry belongs to this variant (reset just ran); resume functions of a
            # graph break live on other code objects, so only count complete trees
            if v.frames is not None and len(entries) == v.frames:
                try:
                    v.tree_guards = sum(count_tree_guards(e.guard_manager) for e in entries)
                except Exception as exc:  # an API shape we did not expect: omit, never guess
                    v.problems.append(f"guard tree not countable: {exc!r}")


def _phase2_timing(model, inputs, ref, variants: list[Variant], calls: int, warmup: int, block: int) -> None:
    """All variants alive together: one reset, compile all, warm up, then ``calls`` timed
    calls per variant, round-robin in blocks; fills samples_ns and re-checks phase 1."""
    import torch

    torch._dynamo.reset()
    compiled = [v for v in variants if v.compiled]
    limit = max(torch._dynamo.config.recompile_limit, len(compiled) + 8)
    with torch._dynamo.config.patch(recompile_limit=limit), torch.no_grad():
        for v in variants:
            if v.compiled:
                v.fn, v.recorder = _compile(model, v)
            else:
                v.fn = model
            for _ in range(1 + warmup):
                v.fn(*inputs)
        counts_after_warmup = {}
        for v in compiled:
            r = v.recorder
            if r is not None:
                counts_after_warmup[v.name] = (r.frames, r.offered, r.kept)
                if (r.frames, r.offered, r.kept) != (v.frames, v.offered, v.kept):
                    v.problems.append(
                        f"timed compile saw frames/offered/kept {r.frames}/{r.offered}/{r.kept}, "
                        f"isolated compile {v.frames}/{v.offered}/{v.kept}"
                    )
        entries_before = len(_cache_entries(model))

        rounds = math.ceil(calls / block)
        gc.collect()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for r_i in range(rounds):
                n = min(block, calls - r_i * block)
                shift = r_i % len(variants)  # rotate who goes first
                for v in variants[shift:] + variants[:shift]:
                    fn, samples = v.fn, v.samples_ns
                    fn(*inputs)  # untimed: brings this variant's cache entry to the front
                    for _ in range(n):
                        t0 = time.perf_counter_ns()
                        fn(*inputs)
                        samples.append(time.perf_counter_ns() - t0)
        finally:
            if gc_was_enabled:
                gc.enable()

        entries = _cache_entries(model)
        for v in compiled:
            r = v.recorder
            if r is not None and (r.frames, r.offered, r.kept) != counts_after_warmup[v.name]:
                v.problems.append("recompiled while being timed")
            own = [e for e in entries if _backend_tag(e) == (v.policy or "none")]
            if v.frames is not None and len(own) != v.frames:
                v.problems.append(f"{len(own)} cache entries while timing, expected {v.frames}")
            if not _same(v.fn(*inputs), ref):
                v.matches_eager = False
                v.problems.append("output differs from eager after timing")
        if len(entries) != entries_before:
            for v in compiled:
                v.problems.append("cache entries changed while timing")


def _percentile(sorted_values: list[int], q: float) -> float:
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return float(sorted_values[idx])


def run_model(name: str, calls: int, warmup: int, block: int, tree_api: bool) -> list[Variant]:
    """Measures one model (``_models.build(name)``); returns its rows: eager, the no-policy
    baseline, then one per ``STD_POLICIES`` entry. Latencies in µs per call (median and p90
    of ``calls`` individually timed calls), counts in guards."""
    import torch

    model, inputs = build(name)
    with torch.no_grad():
        ref = model(*inputs)

    variants = [Variant(EAGER, None, compiled=False), Variant(NO_POLICY, None, compiled=True)]
    variants += [Variant(p, p, compiled=True) for p in STD_POLICIES]

    _phase1_counts(model, inputs, ref, variants, tree_api)
    _phase2_timing(model, inputs, ref, variants, calls, warmup, block)
    torch._dynamo.reset()

    for v in variants:
        s = sorted(v.samples_ns)
        v.median_us = statistics.median(s) / 1000.0
        v.p90_us = _percentile(s, 0.9) / 1000.0
    eager_us = variants[0].median_us
    base_us = variants[1].median_us
    for v in variants:
        v.vs_eager = v.median_us / eager_us
        v.vs_no_policy = v.median_us / base_us
    return variants


# --------------------------------------------------------------------------- output


def machine_description() -> str:
    """CPU model (platform.processor(), else /proc/cpuinfo), architecture and CPU count."""
    cpu = platform.processor()
    if not cpu:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    return f"{cpu or 'unknown CPU'} ({platform.machine()}), {os.cpu_count()} CPUs"


def _fmt(value, spec: str = "d") -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: list[Variant], header: str, show_tree: bool) -> str:
    """The aligned text table for one model: ``header``, then one line per row (counts in
    guards, latencies in µs per call, ratios of medians)."""
    cols = ["policy", "offered", "kept", "dropped"]
    if show_tree:
        cols.append("tree guards")
    cols += ["median µs", "p90 µs", "vs no policy", "vs eager", "= eager"]
    body = []
    for v in rows:
        cells = [v.name, _fmt(v.offered), _fmt(v.kept), _fmt(v.dropped)]
        if show_tree:
            cells.append(_fmt(v.tree_guards) if v.compiled else "-")
        cells += [
            _fmt(v.median_us, ".1f"),
            _fmt(v.p90_us, ".1f"),
            _fmt(v.vs_no_policy, ".2f") + "x",
            _fmt(v.vs_eager, ".2f") + "x",
            "ref" if not v.compiled else ("✓" if v.matches_eager and not v.problems else "✗"),
        ]
        body.append(cells)
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(cols)]

    def line(cells):
        out = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "  ".join(out).rstrip()

    lines = [header, line(cols), line(["-" * w for w in widths])]
    lines += [line(r) for r in body]
    return "\n".join(lines)


_REPORTED = (
    "name", "policy", "compiled", "frames", "offered", "kept", "dropped", "tree_guards",
    "compile_s", "median_us", "p90_us", "vs_no_policy", "vs_eager", "matches_eager", "problems",
)


def _row_json(v: Variant, show_tree: bool) -> dict[str, Any]:
    """One row for ``--json``: the table's numbers plus frames and compile seconds."""
    row = {k: getattr(v, k) for k in _REPORTED}
    row["problems"] = list(v.problems)
    if not show_tree:
        row["tree_guards"] = None
    return row


def main(argv: list[str] | None = None) -> int:
    """Runs the demo; returns 0 when every compiled variant matches eager and every
    cross-check holds, 1 otherwise (argparse exits with 2 on bad arguments)."""
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy demo",
        description="Guards kept and per-call latency of small models under each standard policy.",
    )
    parser.add_argument("--calls", type=int, default=300, help="timed calls per variant (default 300)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed warm-up calls per variant (default 20)")
    parser.add_argument("--block", type=int, default=10, help="consecutive calls per variant per round (default 10)")
    parser.add_argument(
        "--models", default=",".join(MODEL_NAMES), help=f"comma-separated, from {','.join(MODEL_NAMES)}"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON to PATH")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODEL_NAMES]
    if not models or unknown:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(MODEL_NAMES)}")
    for flag in ("calls", "block"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")

    t_start = time.perf_counter()
    import torch

    tree_api = _tree_api_available()
    machine = machine_description()
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "machine": machine,
        "torch_threads": torch.get_num_threads(),
        "calls": args.calls,
        "warmup": args.warmup,
        "block": args.block,
        "units": {"latency": "µs per call", "counts": "guards, summed over compiled frames"},
        "models": {},
    }
    failed = False
    for i, name in enumerate(models):
        rows = run_model(name, args.calls, args.warmup, args.block, tree_api)
        show_tree = tree_api and any(v.tree_guards is not None for v in rows)
        header = (
            f"== {name} | torch {torch.__version__} | {args.calls} timed calls per variant "
            f"(interleaved, blocks of {args.block}, {args.warmup} warm-up) | {machine}, "
            f"{torch.get_num_threads()} torch threads"
        )
        if i:
            print()
        print(format_table(rows, header, show_tree))
        for v in rows:
            for p in v.problems:
                print(f"  ✗ {v.name}: {p}")
            if v.compiled and (not v.matches_eager or v.problems):
                failed = True
        report["models"][name] = [_row_json(v, show_tree) for v in rows]
        sys.stdout.flush()

    print()
    print(
        "offered/kept/dropped: guards the filter saw and decided, summed over compiled frames "
        "(no policy: Dynamo's pre-filter count, all kept); tree guards: leaf + epilogue guards in "
        "the final guard-manager tree; µs: per call, median/p90; ratios: median / median."
    )
    elapsed = time.perf_counter() - t_start
    report["wall_s"] = elapsed
    print(f"total {elapsed:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {args.json}")
    if failed:
        print("FAILED: a compiled variant differs from eager or a cross-check did not hold", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
