"""Which frame torch is compiling when it calls ``guard_filter_fn``, and one frame's
explanations labelled with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any


@dataclasses.dataclass(frozen=True)
class CompiledFrame:
    """The frame a ``guard_filter_fn`` call decided the guards of: the compiled code's
    function name, file and first line (``co_name``, ``co_filename``, ``co_firstlineno``)
    and Dynamo's compile id (``"0/0"``); ``""`` or 0 where torch did not say."""

    function: str = ""
    file: str = ""
    line: int = 0
    compile_id: str = ""

    def __str__(self) -> str:
        return f"{self.function} at {self.file}:{self.line} [{self.compile_id}]"


def compiled_frame() -> CompiledFrame:
    """The frame being compiled, for a ``guard_filter_fn`` call in progress: the ``f_code``
    of torch's ``CheckFunctionManager.__init__`` up the stack
    (``torch_internals.compiling_frame``) and Dynamo's compile id. Never raises: it is only a
    label."""
    try:
        from . import torch_internals

        found = torch_internals.compiling_frame() or {}
        f_code = found.get("f_code")
        line = getattr(f_code, "co_firstlineno", 0)
        return CompiledFrame(_text(getattr(f_code, "co_name", "")), _text(getattr(f_code, "co_filename", "")),
                             line if isinstance(line, int) else 0, torch_internals.compile_id())
    except Exception:  # introspection only: never fail a compile over a label
        return CompiledFrame()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class FrameExplanations(list):
    """One compiled frame's ``Explanation`` objects, in the order torch offered the guards
    (a ``list``), and ``frame``: the ``CompiledFrame`` they belong to."""

    def __init__(self, explanations: Iterable[Any] = (), frame: CompiledFrame | None = None):
        super().__init__(explanations)
        self.frame = frame if frame is not None else CompiledFrame()

    def __repr__(self) -> str:
        return f"<FrameExplanations {self.frame}: {len(self)} guards>"
