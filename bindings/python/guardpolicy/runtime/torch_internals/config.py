"""Dynamo's config (``torch._dynamo.config``), its counters and compile metrics
(``torch._dynamo.utils``), its backends by name and its legacy entry point
(``torch._dynamo.optimize``): what the Python tools (capture, audit, suggest, bench), the
config lines and the scripts under bench/ read and set.
"""

from __future__ import annotations

from typing import Any

import torch
import torch._dynamo

#: The module users set Dynamo's knobs on, as messages name it (``--dynamo-config``, doctor).
DYNAMO_CONFIG = "torch._dynamo.config"
#: Inductor's config module, as messages name it.
INDUCTOR_CONFIG = "torch._inductor.config"
#: The logger Dynamo warns on (a recompile limit hit): what a tool quiets while a storm runs.
DYNAMO_LOGGER = "torch._dynamo"
#: Where users mark a dimension dynamic, as advice names it.
MARK_DYNAMIC = "torch._dynamo.mark_dynamic"


def limit_hit(limit: str, value: Any) -> str:
    """torch's words when a frame reaches a recompile limit (``convert_frame``'s warning):
    ``torch._dynamo hit config.recompile_limit (8)`` for ``limit`` the knob's name and
    ``value`` its value then."""
    return f"{DYNAMO_LOGGER} hit config.{limit} ({value})"


def dynamo_config() -> Any:
    return torch._dynamo.config


def config_patch(**knobs: Any) -> Any:
    """A context manager setting ``torch._dynamo.config`` knobs (``recompile_limit=64``,
    ``install_free_tensors=True``) for its body, as ``torch._dynamo.config.patch``."""
    return torch._dynamo.config.patch(**knobs)


def config_value(name: str) -> Any:
    """The current value of the ``torch._dynamo.config`` knob ``name``; AttributeError when
    this torch has no such knob."""
    return getattr(torch._dynamo.config, name)


def has_config(name: str) -> bool:
    """Whether ``torch._dynamo.config`` has the knob ``name``."""
    return hasattr(torch._dynamo.config, name)


def counters() -> Any:
    """Dynamo's event counters (``torch._dynamo.utils.counters``: ``counters["stats"]
    ["unique_graphs"]``, ``counters["recompiles"]``, ...), a dict of ``Counter`` objects."""
    import torch._dynamo.utils

    return torch._dynamo.utils.counters


def compilation_metrics() -> list:
    """Dynamo's ``CompilationMetrics`` records since the last ``clear_compilation_metrics()``
    (one per frame compile: ``entire_frame_compile_time_s``, ``guard_count``, ...)."""
    import torch._dynamo.utils

    return list(torch._dynamo.utils.get_compilation_metrics())


def clear_compilation_metrics() -> None:
    import torch._dynamo.utils

    torch._dynamo.utils.clear_compilation_metrics()


def lookup_backend(name: str) -> Any:
    """The registered ``torch.compile`` backend function called ``name`` ("eager",
    "inductor"); torch's error for an unknown name."""
    return torch._dynamo.lookup_backend(name)


class dynamo_optimize_replaced:  # noqa: N801 - a context manager, named for what it does
    """Within the block, ``torch._dynamo.optimize`` is ``replacement(original, *args,
    **kwargs)``: how ``capture`` sees filters passed through the legacy entry point. The
    original is restored on exit, whatever happened."""

    def __init__(self, replacement: Any) -> None:
        self._replacement = replacement
        self._original: Any = None

    def __enter__(self) -> Any:
        import torch._dynamo

        self._original = original = torch._dynamo.optimize
        torch._dynamo.optimize = lambda *a, **kw: self._replacement(original, *a, **kw)
        return original

    def __exit__(self, *exc: Any) -> None:
        import torch._dynamo

        torch._dynamo.optimize = self._original
