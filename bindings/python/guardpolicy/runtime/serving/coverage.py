"""``guardpolicy.coverage(compiled, calls)``: ``would_recompile`` for each of a list of calls
(the batch sizes, sequence lengths and option objects traffic will send), as a table whose
rows say which cache entry serves each call or which guard fails; checked before traffic,
nothing runs and nothing compiles."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from .check import WouldRecompile, check_frame
from .frame import top_frame

_SHORT_DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64",
                 "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}
_ARG_WIDTH = 48


@dataclasses.dataclass(frozen=True)
class CoverageRow:
    """One call of ``coverage``: ``index`` (its position in ``calls``), ``call`` (its
    arguments, short: ``f32[2, 8], scale=0.5``), ``would_compile``, ``served_by`` (the
    cache entry's compile id, or None) and ``answer``, the call's ``WouldRecompile``."""

    index: int
    call: str
    would_compile: bool
    served_by: str | None
    answer: WouldRecompile

    @property
    def failing(self) -> str:
        """The first entry's failing guard, ``guard: expected X, got Y`` (``""`` when served)."""
        failures = self.answer.failures
        return str(failures[0]) if failures and self.served_by is None else ""


class Coverage(list):
    """The rows of ``coverage`` (a ``list`` of ``CoverageRow``), with ``covered`` (no call
    would compile), ``compiling`` (the rows that would) and a table as ``str``."""

    @property
    def covered(self) -> bool:
        return not self.compiling

    @property
    def compiling(self) -> list[CoverageRow]:
        return [row for row in self if row.would_compile]

    def __str__(self) -> str:
        lines = ["| # | call | served by | failing guard (first entry) |", "|---:|---|---|---|"]
        for row in self:
            served = row.served_by or ("eager (recompile limit)" if row.answer.runs_eagerly else "**compiles**")
            lines.append(f"| {row.index} | {_cell(row.call)} | {served} | {_cell(row.failing)} |")
        unchecked = sorted({f for row in self for f in row.answer.unchecked_frames})
        n, bad = len(self), len(self.compiling)
        lines.append("")
        lines.append(f"{n - bad} of {n} calls served by a cache entry; {bad} would compile"
                     + (f" (frames after a graph break not checked: {', '.join(unchecked)})" if unchecked else ""))
        return "\n".join(lines)


def coverage(compiled: Any, calls: Iterable[Any]) -> Coverage:
    """``would_recompile(compiled, *args, **kwargs)`` for each call of ``calls``, as a
    ``Coverage`` table. A call is ``(args, kwargs)`` (a tuple and a dict) or a tuple of
    positional arguments. Raises TypeError for a call of another shape, or whose arguments do
    not bind to the first frame, naming its index; what ``would_recompile`` raises otherwise."""
    frame = top_frame(compiled)
    rows = Coverage()
    for i, call in enumerate(calls):
        args, kwargs = split_call(call, i)
        try:
            f_locals = frame.bind(args, kwargs)
        except TypeError as error:
            raise TypeError(f"call {i} does not bind to {frame.label.function}: {error}") from None
        found = check_frame(frame, f_locals)
        rows.append(CoverageRow(i, describe(args, kwargs), found.would_compile, found.served_by, found))
    return rows


def split_call(call: Any, index: int) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of one call of a ``calls`` list."""
    if (isinstance(call, (tuple, list)) and len(call) == 2 and isinstance(call[0], (tuple, list))
            and isinstance(call[1], dict)):
        return tuple(call[0]), dict(call[1])
    if isinstance(call, tuple):
        return call, {}
    raise TypeError(f"call {index} is a {type(call).__name__}: give (args, kwargs) or a tuple of positional "
                    "arguments")


def describe(args: tuple, kwargs: dict) -> str:
    """A call's arguments, short: tensors as ``f32[2, 8]``, numbers and strings as themselves,
    other objects by their class."""
    parts = [_arg(a) for a in args] + [f"{k}={_arg(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _arg(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        name = str(dtype).removeprefix("torch.")
        grad = " grad" if getattr(value, "requires_grad", False) else ""
        return f"{_SHORT_DTYPES.get(name, name)}[{', '.join(map(str, shape))}]{grad}"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 16 else repr(value[:13] + "...")
    if isinstance(value, (tuple, list)) and len(value) <= 4:
        inner = ", ".join(_arg(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return type(value).__name__


def _cell(text: str) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= _ARG_WIDTH * 2 else text[:_ARG_WIDTH * 2 - 3] + "..."
