"""The compiled object's Dynamo context (``torch._dynamo.eval_frame``, ``convert_frame``):
what runs when *one* compiled object compiles or is called, and torch's mark of a call its
stance refused.

torch has no public way to run code only when *one* compiled object compiles, or to give one
compiled object the ``skip_guard_eval_unsafe`` stance while others keep full guard
evaluation. Dynamo's own machinery offers both, privately:

* ``OptimizeContext.callback`` (``torch/_dynamo/eval_frame.py``): what the eval-frame hook
  calls on a cache miss of a frame run under this context, i.e. only when a frame compiles
  (or is first seen). Wrapping it scopes config knobs to this object's compiles.
* ``OptimizeContext.enter_exit_hooks``: called by ``compile_wrapper`` on every call of this
  context's compiled object, just before it reads ``eval_frame._stance`` to set the C flag
  ``skip_guard_eval_unsafe`` (a global on 2.13 and 2.14, per thread on 2.15, copied from the
  global stance on each compiled call); the hook's return value is called when the call ends.
* ``convert_frame.compile_lock``: the lock every Dynamo compile holds.
"""

from __future__ import annotations

import os
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
    torch 2.13 and 2.14)."""
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


# -- the stance that recovers (guardpolicy.runtime.recovery) ---------------------------------------
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
