"""Per-call latency after the stance recovered (``guardpolicy.runtime.call.recovery``) against before, for
``bench/bench_runtime.py --recovery``: one interleaved run (``latency.measure``) of the
recommended recipe (nn-module guards dropped, free tensors, the stance) four ways:

* ``before (torch)`` / ``before (gp.compile)``: the torch way and ``gp.compile``, one cache
  entry each, the stance on;
* ``after a recovery (gp.compile)``: warmed up, then one call with a batch one row shorter
  (no cache entry accepts it under the stance: it recovers, ``stats.recoveries == 1``,
  compiling a second entry), then warmed up again, the stance back on;
* ``after a recompile (torch)``, its twin: ``torch.compile`` called on both batches before
  ``set_stance`` is entered, so it holds the same two cache entries.

Every variant compiles with ``dynamic=False``: the copies share Dynamo's automatic-dynamic
state (it is keyed by file, line and name), so a compile without it after the first
recompile of one copy makes the entries compiled next dynamic in the batch size (even those
of ``dynamic=False`` objects), and nothing would recover.
A call after recovery looks up two cache entries where one was before (torch tries the newest
first: its differentiating guards fail on the old batch size, then the old entry's pass);
the twin pays the same, so the ratio to the twin is what guardpolicy adds.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..runtime import compiled as runtime
from ..runtime import torch_internals
from . import latency


def shorter(inputs: tuple) -> tuple:
    """``inputs`` with the first tensor one row shorter (a ragged last batch)."""
    first, *rest = inputs
    if not isinstance(first, torch.Tensor) or first.shape[0] < 2:
        raise ValueError("the recovery rows need a first input with a batch of at least 2")
    return (first[:-1], *rest)


def _torch_way(model: Any, backend: str, recipe: latency.Recipe, inputs: tuple, label: str) -> latency.Variant:
    fn = torch.compile(model, backend=backend, dynamic=False,
                       options={"guard_filter_fn": getattr(torch.compiler, f"{recipe.std}_unsafe")})
    with torch_internals.config_patch(install_free_tensors=recipe.ift):
        fn(*inputs)  # compiles with the knob, the torch way: set once, around the compile
    return latency.Variant(label, fn, latency.stance_block)


def _gp_way(model: Any, backend: str, recipe: latency.Recipe, inputs: tuple, label: str,
            twin: str) -> latency.Variant:
    fn = runtime.compile(model, recipe.policy_source(), backend=backend, dynamic=False)
    fn(*inputs)
    return latency.Variant(label, fn, twin=twin)


def recovery_variants(model: Any, inputs: tuple, backend: str) -> list[latency.Variant]:
    """eager, no filter, and the recommended recipe before and after a recovery, each the
    torch way and through ``gp.compile`` (compiled; see the module docstring)."""
    recipe = next(r for r in latency.RECIPES if r.name.startswith("recommended"))
    short = shorter(inputs)
    no_filter = torch.compile(latency.own_class_copy(model), backend=backend, dynamic=False)
    no_filter(*inputs)
    out = [latency.Variant("eager", copy.deepcopy(model)), latency.Variant("no filter", no_filter)]
    copy_ = latency.own_class_copy
    before_t = _torch_way(copy_(model), backend, recipe, inputs, "before (torch)")
    before_g = _gp_way(copy_(model), backend, recipe, inputs, "before (gp.compile)", before_t.label)
    after_t = _torch_way(copy_(model), backend, recipe, inputs, "after a recompile (torch)")
    after_t.fn(*short)  # its second cache entry, compiled with every guard
    after_g = _gp_way(copy_(model), backend, recipe, inputs, "after a recovery (gp.compile)", after_t.label)
    stats = runtime.stats(after_g.fn)
    for _ in range(3 * latency.WARMUP):
        after_g.fn(*inputs)
    assert stats.stance_active, "the stance did not switch on"
    after_g.fn(*short)
    if stats.recoveries != 1 or stats.compiles != 2:
        raise SystemExit(f"after a recovery (gp.compile): expected 1 recovery and 2 compiles, "
                         f"got {stats.recoveries} and {stats.compiles}")
    return out + [before_t, before_g, after_t, after_g]


def after_over_before(rows: list[dict]) -> float:
    """gp.compile's median after a recovery over its median before, in the same run."""
    med = {r["variant"]: r["median_us"] for r in rows}
    return med["after a recovery (gp.compile)"] / med["before (gp.compile)"]
