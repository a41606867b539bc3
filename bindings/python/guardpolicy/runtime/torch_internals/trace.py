"""torch's logs (``torch._logging``: ``TORCH_LOGS``, ``TORCH_TRACE``) and callgrind's
instrumentation (``torch._C._valgrind_toggle``).

TORCH_LOGS=guardpolicy (INFO) and TORCH_LOGS=+guardpolicy (DEBUG) name the `guardpolicy`
logger: torch accepts any importable module there, and ``register_log`` also lets
``torch._logging.set_logs(guardpolicy=logging.DEBUG)`` name it. TORCH_TRACE's structured
trace takes artifacts under the compile id in progress (``trace_structured_artifact``),
which tlparse lists beside torch's own for that compile.
"""

from __future__ import annotations

from typing import Any

import torch


def register_torch_log(setting: str, logger_name: str) -> bool:
    """Registers ``logger_name`` with torch's logging under ``setting`` (``TORCH_LOGS`` and
    ``torch._logging.set_logs``), as torch registers its own in
    ``torch/_logging/_registrations.py``. False on a torch without ``register_log``."""
    internal = getattr(getattr(torch, "_logging", None), "_internal", None)
    register = getattr(internal, "register_log", None)
    if register is None:
        return False
    if setting not in getattr(getattr(internal, "log_registry", None), "log_alias_to_log_qnames", {}):
        register(setting, logger_name)
    return True


def trace_artifact(name: str, payload_fn: Any) -> None:
    """Writes ``payload_fn()`` (a JSON-able object) to TORCH_TRACE's structured trace as the
    artifact ``name`` of the compile in progress; nothing when no trace is being written
    (torch checks that first, so ``payload_fn`` is then never called)."""
    trace = getattr(getattr(torch, "_logging", None), "trace_structured", None)
    if trace is not None:
        trace("artifact", metadata_fn=lambda: {"name": name, "encoding": "json"}, payload_fn=payload_fn)


def valgrind_toggle() -> None:
    """Starts or stops callgrind's instrumentation (``torch._C._valgrind_toggle``)."""
    torch._C._valgrind_toggle()


def valgrind_toggle_and_dump_stats() -> None:
    """Stops callgrind's instrumentation and dumps its counts (``torch._C.
    _valgrind_toggle_and_dump_stats``)."""
    torch._C._valgrind_toggle_and_dump_stats()
