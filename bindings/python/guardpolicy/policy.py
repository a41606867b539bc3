"""The Python face of a compiled policy: a ``guard_filter_fn`` with introspection."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from . import _core


@dataclasses.dataclass(frozen=True)
class RuleRef:
    """Where a decision came from: the policy that wrote the rule and its source position."""

    policy: str
    file: str
    line: int
    column: int
    decision: str  # "keep" or "drop"

    def __str__(self) -> str:
        return f"{self.policy} at {self.file}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The decision for one guard entry. ``rule`` is None when the policy default decided."""

    keep: bool
    rule: RuleRef | None
    name: str
    guard_type: str

    @property
    def decision(self) -> str:
        return "keep" if self.keep else "drop"


class Policy:
    """A compiled, verified guard-filter policy.

    Call it with ``list[GuardFilterEntry]`` (what ``torch.compile`` passes as
    ``guard_filter_fn``): it returns a ``list[bool]`` of the same length, ``True`` = keep,
    each element exactly ``bool``. It reads only the fields listed in ``fields`` and keeps
    no reference to any entry after the call. Immutable; safe to share between threads.
    """

    __slots__ = ("_compiled", "_rules")

    def __init__(self, compiled: _core.CompiledPolicy):
        self._compiled = compiled
        self._rules = [RuleRef(**r) for r in compiled.rules]

    def __call__(self, entries: Sequence[Any]) -> list[bool]:
        """``guard_filter_fn``: ``list[GuardFilterEntry] -> list[bool]``, True = keep."""
        return self._compiled(entries)

    def evaluate(self, rows: Sequence[Mapping[str, Any]]) -> list[bool]:
        """Decisions for plain mappings ``{field name: value}`` (absent fields read as
        false, 0 or ""); the same program as ``__call__``, for tests and snapshots.
        Unlike ``__call__``, a row that cannot be read raises (TypeError, ValueError)."""
        return [keep for keep, _ in self._compiled.explain(list(rows), True, True)]

    def explain(self, entries: Sequence[Any]) -> list[Explanation]:
        """Per entry (a ``GuardFilterEntry`` or a mapping row as for ``evaluate``): the
        decision, the rule that made it (or None for the default), the ``name`` and
        ``guard_type``. Any iterable is accepted."""
        entries = list(entries)
        rows = bool(entries) and all(isinstance(e, Mapping) for e in entries)
        out = []
        for entry, (keep, rule) in zip(entries, self._compiled.explain(entries, rows, rows)):
            field = entry.get if rows else (lambda key, default, e=entry: getattr(e, key, default))
            out.append(
                Explanation(
                    keep=keep,
                    rule=self._rules[rule] if rule >= 0 else None,
                    name=str(field("name", "")),
                    guard_type=str(field("guard_type", "")),
                )
            )
        return out

    @property
    def name(self) -> str:
        return self._compiled.name

    @property
    def doc(self) -> str:
        return self._compiled.doc

    @property
    def is_unsafe(self) -> bool:
        return self._compiled.is_unsafe

    @property
    def fields(self) -> list[str]:
        """Schema fields the policy reads, in slot order."""
        return list(self._compiled.fields)

    @property
    def params(self) -> dict[str, Any]:
        """The values the parameters are bound to (declared defaults, then ``load(**params)``)."""
        return dict(self._compiled.params)

    @property
    def source_file(self) -> str:
        """The file the policy was loaded from (``<string>`` for source text)."""
        return self._compiled.source_file

    @property
    def rules(self) -> list[RuleRef]:
        return list(self._rules)

    @property
    def default_decision(self) -> str:
        return self._compiled.default_decision

    @property
    def config(self) -> dict[str, Any]:
        """``config`` lines: torch._dynamo.config keys and values."""
        return dict(self._compiled.config)

    @property
    def stance(self) -> tuple[str, int] | None:
        """``(stance, after_calls)`` from a ``stance`` line, or None."""
        return self._compiled.stance

    @property
    def on_error(self) -> str:
        return self._compiled.on_error

    def save(self, path) -> None:
        """Writes the compiled policy as a ``.gpolc`` artifact (what ``guardpolicy compile``
        writes, through the same code: atomically, never over a FIFO, a device, a read-only
        file or the policy's own source); ``guardpolicy.load(path)`` reads it back, verified.
        Raises ``OSError`` (``PermissionError``, ``FileExistsError``, ...) and leaves
        ``path`` as it was when it may not be written."""
        from ._files import write_file

        # The source is named only if it is a file ("<string>" is none: no file is the same).
        write_file(path, self._compiled.serialize(), inputs=[self.source_file] if self.source_file else [])

    def disassemble(self) -> str:
        """The bytecode listing (same as ``guardpolicy disasm``)."""
        return self._compiled.disassemble()

    def __repr__(self) -> str:
        return f"<guardpolicy.Policy {self.name!r}: {len(self._rules)} rules, default {self.default_decision}>"
