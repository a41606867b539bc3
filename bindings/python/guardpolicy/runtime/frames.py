"""Which frame torch is compiling when it calls ``guard_filter_fn``, one frame's
explanations labelled with it, and a frame torch stopped compiling (``EagerFallback``)."""

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


@dataclasses.dataclass(frozen=True)
class EagerFallback:
    """A frame torch stopped compiling at a recompile limit: from then on a call of it that
    none of its cache entries accepts runs eagerly (uncompiled). ``frame``: the frame, with
    the compile id of the compile torch refused; ``limit``: Dynamo's config knob
    (``recompile_limit`` or ``accumulated_recompile_limit``) and ``value``, its value then;
    ``last_reason``: torch's recompile reason of that call, the guard that failed (``""``
    where torch kept no record); ``most_failed``: the guard that failed most often over the
    frame's recompiles and how often (``"self.step (EQUALS_MATCH) failed 7 times"``; ``""``
    where none was recorded)."""

    frame: CompiledFrame
    limit: str
    value: Any
    last_reason: str
    most_failed: str = ""

    @property
    def hit(self) -> str:
        """torch's words for the limit this frame reached (``torch_internals.limit_hit``)."""
        from . import torch_internals

        return torch_internals.limit_hit(self.limit, self.value)

    def __str__(self) -> str:
        most = f"; most often: {self.most_failed}" if self.most_failed else ""
        return f"{self.frame}: {self.hit}, last reason: {self.last_reason or 'not recorded'}{most}"


def code_frame(code: Any, compile_id: str = "") -> CompiledFrame:
    """The label of the frame running ``code`` (a code object, or anything: never raises)."""
    line = getattr(code, "co_firstlineno", 0)
    return CompiledFrame(_text(getattr(code, "co_name", "")), _text(getattr(code, "co_filename", "")),
                         line if isinstance(line, int) else 0, compile_id)


def compiled_frame() -> CompiledFrame:
    """The frame being compiled, for a ``guard_filter_fn`` call in progress: the ``f_code``
    of torch's ``CheckFunctionManager.__init__`` up the stack
    (``torch_internals.compiling_frame``) and Dynamo's compile id. Never raises: it is only a
    label."""
    try:
        from . import torch_internals

        found = torch_internals.compiling_frame() or {}
        return code_frame(found.get("f_code"), torch_internals.compile_id())
    except Exception:  # introspection only: never fail a compile over a label
        return CompiledFrame()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class FrameExplanations(list):
    """One compiled frame's ``Explanation`` objects, in the order torch offered the guards
    (a ``list``), ``frame``: the ``CompiledFrame`` they belong to, and ``hot``: its groups of
    watched guards that went hot, rechecked on 8 calls in a row (``watch.hot``), each with the
    calls torch's manager of its guards answered, by frame and roots (``{'Model.forward (o)':
    90}``; ``guardpolicy.explain`` fills it, as ``stats(compiled).watches.hot`` holds it)."""

    def __init__(self, explanations: Iterable[Any] = (), frame: CompiledFrame | None = None,
                 hot: dict[str, int] | None = None):
        super().__init__(explanations)
        self.frame = frame if frame is not None else CompiledFrame()
        self.hot = dict(hot or {})

    def __repr__(self) -> str:
        hot = f", hot {self.hot}" if self.hot else ""
        return f"<FrameExplanations {self.frame}: {len(self)} guards{hot}>"
