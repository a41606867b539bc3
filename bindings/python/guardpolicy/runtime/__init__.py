"""``guardpolicy.compile`` and everything it runs inside Dynamo: the torch boundary
(``torch_internals``), the frame being compiled and its explanations (``frames``), the
per-call path (``call_path``, ``frame_locals``), verify (``verify``), the dry run
(``dry_run``), direct dispatch (``dispatch``), stance recovery (``recovery``), the logger
(``logs``), and the entry point with its module classes (``compiled``).

Above ``api`` and ``distributed``, below ``tools``.
"""

from __future__ import annotations

from typing import Any

from .compiled import CompileStats, compile, explain, stats  # noqa: A004, F401


def __getattr__(name: str) -> Any:  # guardpolicy.runtime.GuardPolicyModule, ._rebuild_module: older pickles
    from . import compiled

    return getattr(compiled, name)
