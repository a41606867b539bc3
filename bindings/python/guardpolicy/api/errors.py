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


class PluginError(Exception):
    """A plugin could not be loaded (not a shared library, no ``gp_plugin_get_api``, another
    ABI major or a newer minor, an invalid declaration, a name already taken, ``init``
    failed), or a plugin callback reported an error while a policy ran with
    ``on_error raise``. The message names the plugin's file and the reason."""


def require_str(value: object, what: str) -> None:
    """A TypeError in the API's own words for a non-str argument (not the native module's
    signature listing)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")


class PolicyRuntimeWarning(RuntimeWarning):
    """A policy could not read a guard entry inside guard_filter_fn and fell back to on_error."""


def warn_internal_failure(policy: str, reason: str, action: str, failures: int = 1, total: int = 1) -> None:
    """Warns that ``failures`` of ``total`` entries of one call could not be read and got
    the policy's ``on_error`` decision (the other entries were decided by the policy)."""
    reason = reason.split("\n\nAt:")[0].strip()  # pybind11 appends a traceback block
    warnings.warn(
        f"guardpolicy: policy `{policy}` could not read {failures} of {total} guard entries "
        f"({reason}); on_error {action} decided them",
        PolicyRuntimeWarning,
        stacklevel=3,
    )


class StaleGuardError(RuntimeError):
    """Verify found that a guard the policy dropped fails on a call's inputs: the cached
    code would have served a stale result (``on_violation raise``). The call did not run.
    ``violation`` (a ``guardpolicy.Violation``) names the frame, each failed dropped guard
    (name, guard_type) and the rule that dropped it. Across ranks (docs/distributed.md),
    every rank raises it: ``violations`` holds every rank's (the first is ``violation``) and
    ``ranks`` the ranks that saw one (empty in one process)."""

    def __init__(self, violation, violations=()):
        violations = tuple(violations) or (violation,)
        ranks = tuple(sorted({v.rank for v in violations if v.rank is not None}))
        text = str(violation)
        if len(violations) > 1:
            text = (f"guardpolicy: stale cache entries on {'ranks ' + ', '.join(map(str, ranks))}:\n"
                    + "\n".join(f"  {v}" for v in violations))
        super().__init__(text)
        self.violation = violation
        self.violations = violations
        self.ranks = ranks


class StaleGuardWarning(RuntimeWarning):
    """Verify found a failed dropped guard under ``on_violation warn``: the call went on
    with the cached (stale) code. One warning per failed guard."""


class StanceRecompileWarning(RuntimeWarning):
    """Under ``on_recompile warn``: a call after the stance's warm-up matched no cache entry
    and compiled a new one (with every guard evaluated); the stance returns after the warm-up
    count. One warning per such call."""


class RankMismatchError(RuntimeError):
    """The ranks of a ``torch.distributed`` process group disagree (``guardpolicy.compile``
    checks it at the first compile, and per compiled frame with ``check_ranks=True``):
    another policy, parameter value, plugin or torch on some rank, a frame whose guards were
    decided differently, or a rank that did not reach the agreement in time. Raised on every
    rank that takes part; the message names the ranks and what differs. ``ranks``: the
    ranks (global numbering) named as differing or missing, where known."""

    def __init__(self, message: str, ranks: tuple[int, ...] = ()):
        super().__init__(message)
        self.ranks = tuple(ranks)
