"""How much memory one trial's eager call may take: bounded before it is taken.

A change the audit tries can blow a model's tensors up (a conv's ``padding`` at the large
value, a sequence length doubled twice): eager's call on that state, the compiled call and
the comparison would then take gigabytes (a ResNet-like net's audit grew past 13 GB). Before
the eager call of a trial runs, each aten op's outputs are sized on the ``meta`` device
(shapes and dtypes only, no data, no random numbers drawn) inside a dispatch mode (views and
in-place ops, which allocate nothing, are not counted); an op that
would take the call's outputs past ``limit`` bytes raises ``TrialTooLarge`` before it runs,
and the trial is "not applied" with the size in its reason. The limit is ``FACTOR`` times
what the model's own call allocates (``measure``), and at least ``FLOOR``.

Ops without a meta kernel (data-dependent shapes: ``nonzero``) are sized after they run.
Importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any, Callable

#: A trial's eager call may allocate this many times the model's own call ...
FACTOR = 8
#: ... and at least this many bytes.
FLOOR = 64 << 20


class TrialTooLarge(RuntimeError):
    """An op of a trial's eager call would take its outputs past the trial's bound."""


def mib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _bytes(out: Any) -> int:
    import torch

    from ...runtime.torch_internals import tree_map

    total = 0

    def one(x: Any) -> Any:
        nonlocal total
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
        return x

    tree_map(one, out)
    return total


def _meta(x: Any) -> Any:
    import torch

    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if (
        isinstance(x, torch.Tensor) and x.layout == torch.strided and x.device.type != "meta") else x


def _sizing_mode(limit: int | None) -> Any:
    """A dispatch mode counting the bytes of every op's outputs (``.total``); with ``limit``,
    raising ``TrialTooLarge`` before an op that would pass it."""
    from ...runtime.torch_internals import dispatch_mode, returns_alias, tree_map

    class Sizing(dispatch_mode()):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if returns_alias(func):  # a view or an in-place op: no new storage
                return func(*args, **kwargs)
            if limit is not None:
                meta_kwargs = tree_map(_meta, kwargs)
                if "device" in meta_kwargs:  # a factory op (torch.zeros): sized on meta too
                    meta_kwargs["device"] = "meta"
                try:
                    size = _bytes(func(*tree_map(_meta, args), **meta_kwargs))
                except Exception:  # noqa: BLE001 - no meta kernel (data-dependent): sized after it runs
                    size = 0
                if self.total + size > limit:
                    raise TrialTooLarge(f"eager's call would allocate over {mib(self.total + size)} by {func} "
                                        f"(the audit's bound per trial: {mib(limit)})")
            out = func(*args, **kwargs)
            self.total += _bytes(out)
            return out

    return Sizing()


def measure(call: Callable[[], Any]) -> tuple[Any, int]:
    """``(call(), bytes its aten ops output)``: the model's own call, sized."""
    mode = _sizing_mode(None)
    with mode:
        out = call()
    return out, mode.total


def limit_for(base_bytes: int) -> int:
    """The bound of one trial's eager call, for a model whose own call allocates ``base_bytes``."""
    return max(FACTOR * base_bytes, FLOOR)


def bounded(call: Callable[[], Any], limit: int) -> Any:
    """``call()`` under the bound (``TrialTooLarge`` before an op that passes it)."""
    with _sizing_mode(limit):
        return call()
