"""guardpolicy's log, in torch's logging: ``TORCH_LOGS=guardpolicy`` prints one line per
compiled frame (the policy, kept and dropped counts, and watched ones apart when the policy
watched any, the compile id) and
``TORCH_LOGS=+guardpolicy`` every decision too (the rule's ``file:line`` and the guard's
code); verify violations, dry-run events, stance recoveries, direct-dispatch fallbacks and
frames torch stopped compiling at a recompile limit go to the same logger. With ``TORCH_TRACE=DIR`` each compiled frame's decisions are also written to
torch's structured trace as the artifact ``guardpolicy_decisions`` of that frame's compile id,
which ``tlparse`` lists beside torch's guard tree.

Nothing here costs a call of the compiled object: it runs when a frame compiles.

A guardpolicy tool's own compiled objects (the demo's, bench's and the audits' variants,
made inside ``tool_objects()``) do not log their stance recoveries: the user never made
them, and the lines would name them by internal names (``p_torch_s_recipe``, the audit's
wrapped ``forward``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections import Counter
from typing import Any, Iterator

#: The ``guardpolicy`` logger (``logging.getLogger("guardpolicy")``): what TORCH_LOGS names.
log = logging.getLogger("guardpolicy")

#: The name of the structured-trace artifact of one compiled frame's decisions.
TRACE_ARTIFACT = "guardpolicy_decisions"

_TOOL_OBJECTS: contextvars.ContextVar[bool] = contextvars.ContextVar("guardpolicy_tool_objects", default=False)


@contextlib.contextmanager
def tool_objects() -> Iterator[None]:
    """What ``guardpolicy.compile`` makes inside the block (in this thread or task) is a
    tool's own object: ``CompileStats.tool_object`` is true, and its stance recoveries are
    not logged or warned about. Objects compiled outside the block speak as ever, wherever
    they are called."""
    token = _TOOL_OBJECTS.set(True)
    try:
        yield
    finally:
        _TOOL_OBJECTS.reset(token)


def making_tool_objects() -> bool:
    """Whether ``guardpolicy.compile`` runs inside ``tool_objects()`` now."""
    return _TOOL_OBJECTS.get()


def register_with_torch() -> bool:
    """Makes ``guardpolicy`` a setting of torch's logging (``torch._logging.set_logs
    (guardpolicy=logging.DEBUG)``); TORCH_LOGS names it either way. Idempotent."""
    from . import torch_internals

    return torch_internals.register_torch_log("guardpolicy", "guardpolicy")


def _decision_row(e: Any) -> dict[str, Any]:
    row = {"guard": e.name, "guard_type": e.guard_type, "decision": e.decision,
           "rule": str(e.rule) if e.rule else "default", "code": e.code}
    if getattr(e, "checked", ""):
        row["checked"] = e.checked  # a watch torch checks on every call anyway, and why
    return row


def _counts(explanations: list) -> str:
    """``"K kept, D dropped"``, or ``"K kept, W watched, D dropped"`` when any guard was
    watched (a watched guard is not counted as kept)."""
    decided = Counter(e.decision for e in explanations)
    watched = f"{decided['watch']} watched, " if decided["watch"] else ""
    return f"{decided['keep']} kept, {watched}{decided['drop']} dropped"


def frame_decided(policy: str, explanations: list, frame: Any) -> None:
    """Logs one compiled frame's decisions (``explanations``: ``Explanation`` objects in the
    order torch offered the guards; ``frame``: its ``CompiledFrame``) and writes them to the
    structured trace when one is being written."""
    from . import torch_internals

    if log.isEnabledFor(logging.INFO):
        log.info("policy `%s` on %s: %d guards, %s", policy, frame, len(explanations), _counts(explanations))
    if log.isEnabledFor(logging.DEBUG):
        for e in explanations:
            code = "; ".join(e.code.splitlines())
            checked = f" (checked on every call: {e.checked})" if getattr(e, "checked", "") else ""
            log.debug("  %s %s %s by %s%s%s", e.decision, e.guard_type, e.name or '""',
                      e.rule if e.rule else "default", checked, f" | {code}" if code else "")
    torch_internals.trace_artifact(TRACE_ARTIFACT, lambda: {
        "policy": policy, "frame": str(frame), "guards": [_decision_row(e) for e in explanations]})
