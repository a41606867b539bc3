"""The interleaved-blocks timing loop every timing tool uses.

After warm-up (the caller's), ``ceil(calls / block)`` rounds; in each round every variant
runs one block: its ``timing_context`` entered (not timed), one untimed call that brings its
cache entry to the front of the shared cache-entry list, then ``block`` calls (fewer in a
last, partial round), each timed alone with ``time.perf_counter_ns``. The variant that goes
first rotates from round to round, and the garbage collector is off throughout, so machine
noise hits every variant alike.
"""

from __future__ import annotations

import gc
import math
import time
from typing import Callable

from .variant import Variant


def time_blocks(variants: list[Variant], inputs: tuple, calls: int, block: int, kwargs: dict | None = None,
                on_round: Callable[[int, int], None] | None = None) -> None:
    """Appends ``calls`` per-call times (ns) to each variant's ``samples`` and sets its
    ``block``; ``on_round(round, rounds)`` (1-based) before each round. The GC is collected
    first, disabled while timing, and re-enabled afterwards if it was enabled."""
    kwargs = kwargs or {}
    rounds = math.ceil(calls / block) if calls > 0 else 0
    for v in variants:
        v.block = block
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            if on_round is not None:
                on_round(r + 1, rounds)
            n = min(block, calls - r * block)
            shift = r % len(variants)  # rotate who goes first
            for v in variants[shift:] + variants[:shift]:
                _time_block(v, inputs, kwargs, n)
    finally:
        if gc_was_enabled:
            gc.enable()


def _time_block(v: Variant, inputs: tuple, kwargs: dict, n: int) -> None:
    """One block of ``v``: in its timing context, one untimed call, then ``n`` timed calls."""
    fn, samples = v.fn, v.samples
    with v.timing_context():
        fn(*inputs, **kwargs)  # untimed: brings this variant's cache entry to the front
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fn(*inputs, **kwargs)
            samples.append(time.perf_counter_ns() - t0)
