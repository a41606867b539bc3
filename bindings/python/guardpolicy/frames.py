"""Which frame torch is compiling when it calls ``guard_filter_fn``, and one frame's
explanations labelled with it."""

from __future__ import annotations

import dataclasses
import sys
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
    argument of torch's ``CheckFunctionManager.__init__`` a few frames up, and
    ``CompileContext.current_compile_id()``. Never raises: it is only a label."""
    function, file, line = "", "", 0
    try:
        frame = sys._getframe(1)
        for _ in range(12):
            if frame is None:
                break
            code = frame.f_code
            if code.co_name == "__init__" and "f_code" in code.co_varnames:
                f_code = frame.f_locals.get("f_code")
                function = _text(getattr(f_code, "co_name", ""))
                file = _text(getattr(f_code, "co_filename", ""))
                line = getattr(f_code, "co_firstlineno", 0)
                line = line if isinstance(line, int) else 0
                break
            frame = frame.f_back
        del frame
    except Exception:  # introspection only: never fail a compile over a label
        function, file, line = "", "", 0
    compile_id = ""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
        compile_id = "" if cid is None else str(cid)
    except Exception:
        compile_id = ""
    return CompiledFrame(function, file, line, compile_id)


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
