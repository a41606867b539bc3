"""Inductor's settings (``torch._inductor``): the options a ``torch.compile(mode=...)`` stands
for, and eager-matching random numbers for the mutation audit's seeded calls.
"""

from __future__ import annotations

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
    setting does not exist."""
    import contextlib

    try:
        import torch._inductor.config as inductor_config
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(inductor_config, "fallback_random"):
        return contextlib.nullcontext()
    return inductor_config.patch(fallback_random=True)
