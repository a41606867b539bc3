"""``Variant``: one timed row of an interleaved run, the same for every timing tool."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

WARMUP = 8  # the stance's quiet calls; ``warm_up`` makes 3 * WARMUP untimed calls after the compile


@dataclass
class Variant:
    """One timed row: ``fn`` called on the inputs; ``samples`` per timed call in ns.

    ``block_ctx`` is entered once around each block of timed calls (the torch way of a
    setting: ``set_stance``, ``config.patch``), ``setup_ctx`` around the compile and warm-up
    where a caller compiles through the variant (the bench command). ``twin``: the label of
    the variant this one is compared with (``vs_torch_way``). ``block``: timed calls per
    block (``time_blocks`` sets it; block i is ``samples[i*block:(i+1)*block]``).
    ``copy_means``: per copy, when copies are pooled (``stats.pooled``), each copy's block
    mean (ns)."""

    label: str
    fn: Callable | None = None
    block_ctx: Callable[[], Any] | None = None
    twin: str | None = None
    samples: list[int] = field(default_factory=list)
    block: int = 0
    copy_means: list[float] = field(default_factory=list)
    setup_ctx: Callable[[], Any] | None = field(default=None, repr=False)

    def timing_context(self) -> Any:
        """The context a block of this variant's timed calls runs in (``block_ctx``, or none)."""
        return self.block_ctx() if self.block_ctx else contextlib.nullcontext()

    def setup_context(self) -> Any:
        """The context its compile and warm-up run in (``setup_ctx``, or none)."""
        return self.setup_ctx() if self.setup_ctx else contextlib.nullcontext()

    def warm_up(self, *inputs: Any, **kwargs: Any) -> None:
        """The untimed calls before timing: the compile, then enough quiet calls
        (3 * ``WARMUP``, in ``timing_context``) for a stance (and direct dispatch) to switch on."""
        self.fn(*inputs, **kwargs)
        with self.timing_context():
            for _ in range(3 * WARMUP):
                self.fn(*inputs, **kwargs)
