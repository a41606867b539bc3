"""One comparison of a compiled output with eager's, as torch's own testing makes it.

Every tool that asks "did the compiled call return what eager returns" (audit, the mutation
audit, suggest, bench) asks it here: ``torch.testing.assert_close`` with its per-dtype default
tolerances (float32: rtol 1.3e-6, atol 1e-5; float64: rtol 1e-7, atol 1e-7; bfloat16: rtol
1.6e-2, atol 1e-5; integers and bools exact), NaN equal to NaN, the same structure (pytree),
shape, dtype and device, and the same ``requires_grad`` on every tensor.
"""

from __future__ import annotations

from typing import Any

#: How outputs are compared, for a tool's report.
TOLERANCE = "torch.testing.assert_close's per-dtype tolerances (float32 rtol 1.3e-6 atol 1e-5), NaN == NaN"


def compare(out: Any, ref: Any) -> str | None:
    """None when ``out`` (the compiled call's result) equals ``ref`` (eager's), else one line
    saying what differs, e.g. ``"Tensor-likes are not close (greatest absolute difference:
    0.236 at index (0, 3) (up to 1e-05 allowed))"`` or ``"requires_grad True, eager False"``.
    Tensors, numbers, and sequences and mappings of them (``ModelOutput`` too); never raises
    for a difference."""
    import torch

    try:
        torch.testing.assert_close(out, ref, equal_nan=True)
    except AssertionError as e:
        return _one_line(str(e))
    except (TypeError, ValueError) as e:  # values assert_close cannot compare: equal or not
        if type(out) is not type(ref) or out != ref:
            return f"{out!r} != {ref!r} ({type(e).__name__})"
    for x, y in zip(_tensors(out), _tensors(ref)):
        if x.requires_grad != y.requires_grad:
            return f"requires_grad {x.requires_grad}, eager {y.requires_grad}"
    return None


def _tensors(value: Any) -> list:
    """The tensors of ``value`` in order, through sequences and mappings."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _one_line(message: str) -> str:
    """assert_close's message in one line: its first line, and the greatest absolute difference
    where it gives one."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    head = lines[0].rstrip(".!") if lines else "outputs differ"
    detail = next((line for line in lines if line.startswith(("Greatest absolute difference", "Expected "))), "")
    return f"{head} ({detail[0].lower() + detail[1:]})" if detail else head
