"""``guardpolicy.compile`` and everything it runs inside Dynamo. What runs when a frame
compiles, the compile-time glue: the entry point with its module classes (``compiled``), the
compiled object's state (``stats``, with its counters and registries in ``records``), the
objects it gives torch (``guard_filter``) and the dry run (``dry_run``). What runs on calls, in
two rooms that import none of that glue: ``call/`` (the per-call path, direct dispatch, the
stance machine and its recovery) and ``watch/``. Shared by both: verify (``verify``), the frame
being compiled and its explanations (``frames``), the logger (``logs``) and the torch boundary
(``torch_internals``).

Above ``api`` and ``distributed``, below ``tools``.
"""

from __future__ import annotations

from typing import Any

from .compiled import CompileStats, compile, explain, stats  # noqa: A004, F401


def __getattr__(name: str) -> Any:  # guardpolicy.runtime.GuardPolicyModule, ._rebuild_module: older pickles
    from . import compiled

    return getattr(compiled, name)
