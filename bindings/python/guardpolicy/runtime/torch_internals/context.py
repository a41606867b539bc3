"""The compiled object's Dynamo context (``torch._dynamo.eval_frame``, ``convert_frame``):
what runs when *one* compiled object compiles or is called, torch's mark of a call its
stance refused, and of a frame it stopped compiling at a recompile limit.

torch has no public way to run code only when *one* compiled object compiles, or to give one
compiled object the ``skip_guard_eval_unsafe`` stance while others keep full guard
evaluation. Dynamo's own machinery offers both, privately:

* ``OptimizeContext.callback`` (``torch/_dynamo/eval_frame.py``): what the eval-frame hook
  calls on a cache miss of a frame run under this context, i.e. only when a frame compiles
  (or is first seen). Wrapping it scopes config knobs to this object's compiles.
* ``OptimizeContext.enter_exit_hooks``: called by ``compile_wrapper`` on every call of this
  context's compiled object, just before it reads ``eval_frame._stance`` to set the C flag
  ``skip_guard_eval_unsafe`` (a global on 2.11 to 2.14, per thread on 2.15, copied from the
  global stance on each compiled call); the hook's return value is called when the call ends.
* ``convert_frame.compile_lock``: the lock every Dynamo compile holds.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch
import torch._dynamo.convert_frame as _convert_frame
import torch._dynamo.eval_frame as _eval_frame

#: Ends each "needs X, which torch V lacks" error.
DOCTOR_HINT = " (`python -m guardpolicy doctor` lists what works on this torch)"

#: ``torch._dynamo.eval_frame``: its ``_stance`` is torch's current ``DynamoStance``
#: (``torch.compiler.set_stance`` replaces the object; read it on every use).
eval_frame = _eval_frame

#: ``torch.compile``'s result for an ``nn.Module``.
OptimizedModule = getattr(_eval_frame, "OptimizedModule", None)
_Context = getattr(_eval_frame, "_TorchDynamoContext", None)


def missing() -> list[str]:
    """The private torch names ``guardpolicy.compile`` needs and this torch lacks (empty on
    torch 2.11 to 2.15)."""
    wanted = {
        "torch._dynamo.eval_frame.OptimizedModule": OptimizedModule,
        "torch._dynamo.eval_frame._TorchDynamoContext": _Context,
        "torch._dynamo.eval_frame._stance": getattr(_eval_frame, "_stance", None),
        "torch._dynamo.convert_frame.compile_lock": getattr(_convert_frame, "compile_lock", None),
    }
    return [name for name, value in wanted.items() if value is None]


def dynamo_context(compiled: Any) -> Any:
    """The ``OptimizeContext`` behind a ``torch.compile`` result: ``OptimizedModule.dynamo_ctx``
    for a module, the ``self`` cell of ``compile_wrapper``'s closure for a function.
    Raises RuntimeError when there is none (a torch whose ``compile_wrapper`` changed)."""
    if OptimizedModule is not None and isinstance(compiled, OptimizedModule):
        return compiled.dynamo_ctx
    for cell in getattr(compiled, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, _Context):
            return value
    raise RuntimeError(
        f"guardpolicy.compile: cannot find the Dynamo context of {type(compiled).__name__} "
        f"(torch {torch.__version__} changed torch.compile's wrapper)")


def hooks_of(ctx: Any) -> list:
    """``ctx.enter_exit_hooks``. Raises RuntimeError on a torch without them."""
    hooks = getattr(ctx, "enter_exit_hooks", None)
    if not isinstance(hooks, list):
        raise RuntimeError(
            f"guardpolicy.compile: torch {torch.__version__} has no per-call enter/exit hooks "
            "on its Dynamo context (OptimizeContext.enter_exit_hooks)")
    return hooks


def compile_lock() -> Any:
    """The re-entrant lock held by every Dynamo compile."""
    return _convert_frame.compile_lock


# -- the stance that recovers (guardpolicy.runtime.call.recovery) ---------------------------------------
#
# Under ``skip_guard_eval_unsafe`` torch's C lookup (torch/csrc/dynamo/eval_frame_cpp.cpp)
# runs each cache entry's differentiating guards only; when none matches it raises a
# RuntimeError instead of compiling. The message is torch's only mark of that failure.

#: How that RuntimeError's message starts (torch 2.6 to 2.15, checked in the 2.15 wheel).
STANCE_MISS_MESSAGE = "Recompilation triggered with skip_guard_eval_unsafe stance"

#: torch's package directory: a traceback whose frames are all in it ran no user code.
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def is_stance_miss(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's refusal to compile under the ``skip_guard_eval_unsafe``
    stance (a call that no cache entry's differentiating guards accept)."""
    return type(exc) is RuntimeError and str(exc).startswith(STANCE_MISS_MESSAGE)


# -- a frame torch stopped compiling (guardpolicy.runtime.guard_filter) -----------------------------
#
# A compile that would take one code object past ``config.recompile_limit`` cache entries (or
# ``accumulated_recompile_limit``) is refused in ``convert_frame._compile``: torch logs
# "torch._dynamo hit config.recompile_limit (8)" on ``torch._dynamo.convert_frame`` (its only
# word of it, silenced with the rest of Dynamo's log) and ``ConvertFrame.__call__`` returns the
# frame execution strategy RUN_ONLY for the frame and the frames it calls, kept for the code:
# from then on a call that no cache entry accepts runs eagerly, and Dynamo's callback is never
# called for that code again. torch returns RUN_ONLY, RUN_ONLY in that case only (2.11 to
# 2.15). The refused compile's ``CompilationMetrics`` record (``torch._dynamo.utils``) names
# the limit (``fail_reason``, torch's graph-break text) and the guard that failed last
# (``recompile_reason``).

try:
    from torch._C._dynamo.eval_frame import _FrameAction
except ImportError:  # a torch without frame execution strategies: nothing is detected
    _FrameAction = None
_RUN_ONLY = getattr(_FrameAction, "RUN_ONLY", None)

#: How torch's ``fail_reason`` of a compile refused at a recompile limit starts (its graph-break type).
RECOMPILE_LIMIT_FAILURE = "Dynamo recompile limit exceeded"


def recompile_limit_hit(result: Any) -> dict[str, Any] | None:
    """None, unless ``result`` (what Dynamo's callback returned for a frame) is torch giving
    up compiling the frame at a recompile limit; then ``limit`` (the ``torch._dynamo.config``
    knob: ``recompile_limit`` or ``accumulated_recompile_limit``), ``value`` (read now: call it
    under the config the compile ran with), ``compile_id`` (the refused compile's, ``"0/8"``)
    and ``last_reason`` (torch's recompile reason, first line: ``"0/7: n == 7 # ..."``), ``""``
    where torch kept no record."""
    strategy = getattr(result, "frame_exec_strategy", None)
    if (_RUN_ONLY is None or getattr(strategy, "cur_action", None) != _RUN_ONLY
            or getattr(strategy, "recursive_action", None) != _RUN_ONLY):
        return None
    import torch._dynamo.utils

    records = torch._dynamo.utils.get_compilation_metrics()
    last = records[-1] if records else None
    failure = getattr(last, "fail_reason", None) or ""
    if not failure.startswith(RECOMPILE_LIMIT_FAILURE):
        last, failure = None, ""  # no record (its deque's limit set to 0): the usual limit
    found = re.search(r"Limit type: (\w+)", failure)
    limit = found.group(1) if found else "recompile_limit"
    reason = (getattr(last, "recompile_reason", None) or "").split("\n", 1)[0]
    return {"limit": limit, "value": getattr(torch._dynamo.config, limit, None),
            "compile_id": str(getattr(last, "compile_id", None) or ""), "last_reason": " ".join(reason.split())}
