"""One model's bench run (``run_model``): compile and warm up every row, count and time its
guards (``guards.measure_guards``), time the calls in one interleaved run
(``guardpolicy.tools.common.timing.time_blocks``), then cross-check; see ``guardpolicy.tools.bench``
(the module docstring) for how the run goes."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...runtime import torch_internals
from ...runtime.compiled import stats
from ..common.compare import compare
from ..common.models import output_tensor
from ..common.progress import Progress
from ..common.timing import median_p90, time_blocks
from .guards import cache_entries, measure_guards, tree_api_available
from .rows import BASELINE, EAGER, VIA_GP, Row


@dataclass
class RunOptions:
    calls: int = 300
    warmup: int = 20
    block: int = 10
    guard_iters: int = 10
    stance_after: int = 10
    backend: str = "eager"  # every compiled variant's: "eager" or "inductor"


def _same(out, ref) -> bool:
    return compare(output_tensor(out), output_tensor(ref)) is None


def _compile_all(model, inputs, ref, rows: list[Row], warmup: int, progress: Progress, label: str,
                 backend: str = "eager") -> None:
    """Compiles and warms up every row's variant; fills compile_s, frames/offered/kept/dropped."""
    compiled = [v for v in rows if v.compiled]
    for v in rows:
        if not v.compiled:
            v.variant.fn = model
            for _ in range(warmup):
                model(*inputs)
            continue
        progress.step(f"{label}: compiling", compiled.index(v) + 1, len(compiled), v.name)
        torch_internals.clear_compilation_metrics()
        v.tag = f"{backend}:{v.tag.rsplit(':', 1)[-1]}"
        v.variant.fn, v.recorder = v.make(model, v.tag)
        with v.variant.setup_context():
            t0 = time.perf_counter()
            out = v.variant.fn(*inputs)
            v.compile_s = time.perf_counter() - t0
            for _ in range(warmup):
                out = v.variant.fn(*inputs)
        v.matches_eager = _same(out, ref)
        _count_guards(v)
        if v.stance_after is not None and v.via == VIA_GP and not stats(v.variant.fn).stance_active:
            v.problems.append(f"stance not active after {warmup} warm-up calls")


def _count_guards(v: Row) -> None:
    """frames/offered/kept/dropped of ``v``'s compiles: its recorder's, checked against
    Dynamo's pre-filter count; Dynamo's count (all kept) without a recorder."""
    metrics = [m for m in torch_internals.compilation_metrics() if getattr(m, "guard_count", None) is not None]
    pre_filter = sum(m.guard_count for m in metrics)
    if v.recorder is not None:
        v.frames, v.offered, v.kept = v.recorder.counts()
        v.dropped = v.recorder.dropped
        if metrics and pre_filter != v.offered:
            v.problems.append(f"filter was offered {v.offered} guards, Dynamo recorded {pre_filter}")
    else:
        v.frames, v.offered, v.kept, v.dropped = len(metrics), pre_filter, pre_filter, 0


def warmup_calls(opts: RunOptions, rows: list[Row]) -> int:
    """Untimed calls per variant after compiling: ``opts.warmup``, or more when a stance
    needs more quiet calls to switch."""
    return max(opts.warmup, max((v.stance_after or 0) for v in rows))


def run_model(label: str, model, inputs: tuple, rows: list[Row], opts: RunOptions,
              progress: Progress | None = None, tree_api: bool | None = None) -> list[Row]:
    """Measures ``model(*inputs)`` under every row's variant (see the module docstring) and
    returns the rows with their numbers filled in."""
    import torch

    progress = progress if progress is not None else Progress("bench", enabled=False)
    tree_api = tree_api_available() if tree_api is None else tree_api
    warmup = warmup_calls(opts, rows)
    with torch.no_grad():
        ref = model(*inputs)

    torch.compiler.reset()
    compiled = [v for v in rows if v.compiled]
    limit = max(torch_internals.config_value("recompile_limit"), len(compiled) + 8)
    acc_limit = max(torch_internals.config_value("accumulated_recompile_limit"), 4 * len(compiled) + 64)
    try:
        with torch_internals.config_patch(recompile_limit=limit, accumulated_recompile_limit=acc_limit), \
                torch.no_grad():
            _compile_all(model, inputs, ref, rows, warmup, progress, label, opts.backend)
            counts = {v.name: v.recorder.counts() for v in compiled if v.recorder is not None}
            progress.step(f"{label}: guard trees and evaluation", 1, 1)
            measure_guards(model, inputs, rows, opts.guard_iters, tree_api)
            entries_before = len(cache_entries(model))
            time_blocks([v.variant for v in rows], inputs, opts.calls, opts.block,
                        on_round=lambda i, n: progress.step(f"{label}: timing round", i, n))
            entries_after = len(cache_entries(model))
            _check_after_timing(compiled, counts, entries_before != entries_after, ref, inputs)
    finally:
        progress.done()
        torch.compiler.reset()
    _check_pairs(rows)
    _fill_latencies(rows)
    return rows


def _check_after_timing(compiled: list[Row], counts: dict, entries_changed: bool, ref, inputs: tuple) -> None:
    """Per compiled row: no recompile and no cache-entry change while timing, and its output
    (one more call in its block context) still equal to eager's."""
    for v in compiled:
        if v.recorder is not None and v.recorder.counts() != counts[v.name]:
            v.problems.append("recompiled while being timed")
        if entries_changed:
            v.problems.append("cache entries changed while timing")
        with v.variant.timing_context():
            out = v.variant.fn(*inputs)
        if not _same(out, ref):
            v.matches_eager = False
            v.problems.append("output differs from eager after timing")


def _check_pairs(rows: list[Row]) -> None:
    """A row with a ``pair`` must have the same frames/offered/kept as that row."""
    by_name = {v.name: v for v in rows}
    for v in rows:
        other = by_name.get(v.pair) if v.pair else None
        if other is not None and (v.frames, v.offered, v.kept) != (other.frames, other.offered, other.kept):
            v.problems.append(
                f"frames/offered/kept {v.frames}/{v.offered}/{v.kept}, but {other.name} "
                f"{other.frames}/{other.offered}/{other.kept}")


def _fill_latencies(rows: list[Row]) -> None:
    """median/p90 µs (``timing.median_p90``) and the ratios to eager's and the baseline's median."""
    for v in rows:
        v.median_us, v.p90_us = median_p90(v.variant)
    by_name = {v.name: v for v in rows}
    eager_us = by_name[EAGER].median_us
    base_us = by_name[BASELINE].median_us
    for v in rows:
        v.vs_eager = v.median_us / eager_us
        v.vs_baseline = v.median_us / base_us
