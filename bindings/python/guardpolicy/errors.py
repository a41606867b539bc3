"""Errors raised by guardpolicy, and the one warning it gives inside Dynamo."""

from __future__ import annotations

import dataclasses
import warnings


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """One finding about a policy source.

    ``line``/``column`` are 1-based (column in bytes); ``end_line``/``end_column`` mark the
    end of the half-open range. ``file`` is None for problems that have no file position.
    ``code`` is stable (``GP`` + 4 digits, see docs/diagnostics.md).
    """

    severity: str
    code: str
    message: str
    file: str | None
    line: int
    column: int
    end_line: int
    end_column: int
    help: str
    rendered: str

    def __str__(self) -> str:
        return self.rendered


class PolicyError(Exception):
    """A policy could not be loaded. ``diagnostics`` holds every problem found, in order."""

    def __init__(self, message: str, diagnostics: list[dict] | None = None):
        super().__init__(message)
        self.diagnostics: list[Diagnostic] = [Diagnostic(**d) for d in (diagnostics or [])]


class PolicyRuntimeWarning(RuntimeWarning):
    """A policy could not read a guard entry inside guard_filter_fn and fell back to on_error."""


_warned: set[str] = set()


def warn_internal_failure(policy: str, reason: str, action: str) -> None:
    """Warns once per policy name that a call fell back to its ``on_error`` action."""
    if policy in _warned:
        return
    _warned.add(policy)
    warnings.warn(
        f"guardpolicy: policy `{policy}` could not read a guard entry ({reason}); "
        f"every guard of this frame is kept" if action == "keep" else
        f"guardpolicy: policy `{policy}` could not read a guard entry ({reason}); "
        f"on_error {action} applies to every guard of this frame",
        PolicyRuntimeWarning,
        stacklevel=2,
    )
