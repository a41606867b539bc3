"""The tools' one timing engine: a ``Variant`` (one timed row), the interleaved-blocks timing
loop (``engine.time_blocks``), the statistics its callers report (``stats``) and the one
machine description (``machine.machine_description``).

Used by ``guardpolicy.bench`` and the latency tools (``guardpolicy.tools.latency``: ``make
demo``, ``bench/*.py``) and by ``python -m guardpolicy bench`` (``guardpolicy.tools.bench``).
"""

from .engine import time_blocks  # noqa: F401
from .machine import machine_description  # noqa: F401
from .stats import block_mean, median_p90, pooled, spread_line, summarize  # noqa: F401
from .variant import WARMUP, Variant  # noqa: F401
