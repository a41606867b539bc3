"""Inductor's settings (``torch._inductor``): the options a ``torch.compile(mode=...)`` stands
for, and eager-matching random numbers for the mutation audit's seeded calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def inductor_mode_options(mode: str) -> dict:
    """The Inductor options a ``torch.compile(mode=...)`` stands for
    (``torch._inductor.list_mode_options``)."""
    from torch._inductor import list_mode_options

    return dict(list_mode_options(mode))


def inductor_fallback_random() -> Any:
    """A context in which Inductor draws random numbers as eager does
    (``torch._inductor.config.fallback_random``), so a seeded compiled call of a model with
    dropout or ``torch.rand*`` can equal a seeded eager call; a null context where the
    setting does not exist.

    Dropout needs one thing more. ``aten.native_dropout`` draws its mask with ``bernoulli_``
    in its input's stride order, and Inductor may hand it an input laid out otherwise than
    eager's (a conv's output in channels-last order): the same seed then zeroes other
    elements. torch 2.12 constrains that input to the traced graph's strides
    (``constrain_to_fx_strides`` in ``torch._inductor.lowering``), 2.13 under
    ``fallback_random`` (``constrain_to_fx_strides_if_fallback_random``); torch 2.11 does
    not, and its compiled dropout differs from eager's even with the setting on. There this
    context registers the same constraint (``constrain_to_fx_strides``) for ``native_dropout``
    while it is open, and turns Inductor's FX-graph and AOTAutograd caches off meanwhile: their
    keys do not include the constraint, so they could serve a graph compiled without it, or
    keep one compiled with it."""
    try:
        import torch._inductor.config as inductor_config
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(inductor_config, "fallback_random"):
        return contextlib.nullcontext()
    return _fallback_random(inductor_config)


@contextlib.contextmanager
def _fallback_random(inductor_config: Any) -> Iterator[None]:
    with inductor_config.patch(fallback_random=True), contextlib.ExitStack() as stack:
        if _dropout_needs_fx_strides():
            stack.enter_context(_dropout_in_fx_strides(inductor_config))
        yield


def _dropout_needs_fx_strides() -> bool:
    """Whether this torch's Inductor lowers ``native_dropout`` without a layout constraint
    (2.11) and has what one is made of (``add_layout_constraint``, ``constrain_to_fx_strides``)."""
    import torch
    import torch._inductor.lowering as lowering

    table = getattr(lowering, "_maybe_layout_constraints", None)
    return (isinstance(table, dict) and torch.ops.aten.native_dropout.default not in table
            and hasattr(lowering, "add_layout_constraint") and hasattr(lowering, "constrain_to_fx_strides"))


@contextlib.contextmanager
def _dropout_in_fx_strides(inductor_config: Any) -> Iterator[None]:
    """``native_dropout``'s input in the traced graph's strides while open (see
    ``inductor_fallback_random``), with the compile caches off."""
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.lowering as lowering

    op = torch.ops.aten.native_dropout.default
    caches_off = contextlib.ExitStack()
    if hasattr(inductor_config, "fx_graph_cache"):
        caches_off.enter_context(inductor_config.patch(fx_graph_cache=False))
    if hasattr(functorch_config, "enable_autograd_cache"):
        caches_off.enter_context(functorch_config.patch(enable_autograd_cache=False))
    with caches_off:
        lowering.add_layout_constraint(op, lowering.constrain_to_fx_strides)
        try:
            yield
        finally:
            lowering._maybe_layout_constraints.pop(op, None)
