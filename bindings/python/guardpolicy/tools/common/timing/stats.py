"""The statistics the timing tools report over a ``Variant``'s samples (ns per call).

* ``summarize``: the latency tools' rows (``guardpolicy.bench``, ``make demo``, ``bench/*.py``):
  median and p90 (the sample at index ``int(0.9 * (n - 1))`` of the sorted samples), the
  block mean (``block_mean``), ratios of medians to no filter and to the twin, and the spread
  of pooled copies (``pooled``).
* ``median_p90``: the bench command's median and p90 (nearest rank: the sample at
  ``ceil(0.9 * n) - 1``), in µs.
"""

from __future__ import annotations

import math
import statistics

from .variant import Variant


def block_mean(v: Variant) -> float:
    """The median over timed blocks of each block's mean (ns): an amortized cost per call that
    counts every call of a block (the one verified call in a block of 100, say), while a
    block the machine disturbed weighs no more than any other."""
    if not v.block:
        return statistics.fmean(v.samples)
    blocks = [v.samples[i:i + v.block] for i in range(0, len(v.samples), v.block)]
    return statistics.median(statistics.fmean(b) for b in blocks if b)


def pooled(variants: list[Variant]) -> list[Variant]:
    """One variant per label, in first-seen order, holding the samples of all its copies
    (block by block) and each copy's ``block_mean`` (``copy_means``)."""
    out: dict[str, Variant] = {}
    for v in variants:
        p = out.get(v.label)
        if p is None:
            p = out[v.label] = Variant(v.label, v.fn, v.block_ctx, v.twin, [], v.block)
        p.samples.extend(v.samples)
        p.copy_means.append(block_mean(v))
    return list(out.values())


def lower_p90(sorted_samples: list[int]) -> float:
    """The latency tools' p90: the sample at index ``int(0.9 * (n - 1))``."""
    return sorted_samples[int(0.9 * (len(sorted_samples) - 1))]


def nearest_rank(sorted_samples: list[int], q: float) -> float:
    """The ``q`` quantile by nearest rank: the sample at ``ceil(q * n) - 1`` (clamped)."""
    idx = min(len(sorted_samples) - 1, max(0, math.ceil(q * len(sorted_samples)) - 1))
    return float(sorted_samples[idx])


def median_p90(v: Variant) -> tuple[float, float]:
    """The bench command's ``(median, p90)`` of ``v``'s samples, in µs (p90 by nearest rank)."""
    s = sorted(v.samples)
    return statistics.median(s) / 1000.0, nearest_rank(s, 0.9) / 1000.0


def summarize(variants: list[Variant]) -> list[dict]:
    """One row per variant: ``variant`` (label), ``median_us``, ``p90_us``, ``block_mean_us``,
    ``vs_no_filter`` (median over ``no filter``'s, else ``torch.compile``'s), ``vs_torch_way``
    and ``minus_torch_way_us`` (against ``twin``, None without one) and ``copy_spread``
    (largest over smallest copy block mean, minus 1; None for one copy)."""
    med = {v.label: statistics.median(v.samples) for v in variants}
    base = med.get("no filter") or med.get("torch.compile")
    rows = []
    for v in variants:
        s = sorted(v.samples)
        rows.append({"variant": v.label, "median_us": med[v.label] / 1e3,
                     "p90_us": lower_p90(s) / 1e3,
                     "block_mean_us": block_mean(v) / 1e3,
                     "vs_no_filter": med[v.label] / base,
                     "vs_torch_way": med[v.label] / med[v.twin] if v.twin else None,
                     "minus_torch_way_us": (med[v.label] - med[v.twin]) / 1e3 if v.twin else None,
                     "copy_spread": (max(v.copy_means) / min(v.copy_means) - 1) if len(v.copy_means) > 1 else None})
    return rows


def spread_line(rows: list[dict]) -> str:
    """A sentence on how far the copies of one variant were apart (``measure(copies=)``),
    the resolution of the run's ratios; empty with one copy."""
    spreads = [r["copy_spread"] for r in rows if r["copy_spread"] is not None]
    if not spreads:
        return ""
    return (f"Copies of one variant (own model copy, cache entry and compiled code) differed by up to "
            f"{100 * max(spreads):.1f}% in this run (block means), {100 * statistics.median(spreads):.1f}% "
            "in the median variant: the resolution of the ratios above.")
