"""``guardpolicy.capture``, ``guardpolicy.audit``, ``guardpolicy.suggest`` and ``guardpolicy.bench``: the Python face of
the tools in ``guardpolicy.tools``. Each result has ``to_json()`` (JSON text) and
``table()`` (the text report; also ``str(result)``). This module imports nothing heavy:
the tools (and torch) are imported when a function is called, so ``import guardpolicy``
stays cheap."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable

#: What ``guardpolicy.audit`` audits when no ``policies`` are given.
DEFAULT_AUDIT_POLICIES = ("skip_guard_on_inbuilt_nn_modules", "skip_guard_on_all_nn_modules",
                          "keep_tensor_guards", "skip_guard_on_globals", "keep_portable_guards",
                          "skip_all_guards")


def doctor():
    """Which guardpolicy features work on the installed torch and Python, and for each that
    does not, the torch internals it lacks: a ``DoctorReport`` (``features``, ``table()``,
    ``to_dict()``); the same as ``python -m guardpolicy doctor``."""
    from .tools.doctor import doctor as _doctor

    return _doctor()


def recompiles(compiled: Any):
    """The recompiles of ``compiled`` (what ``guardpolicy.compile`` returned) so far: every
    guard that failed in a cache entry on a recompile, and the storms (a guard that failed in
    two recompiles or more), most failures first, each with a verdict and advice: a
    ``RecompilesReport`` (``storms``, ``recompiles``, ``table()``, ``to_json()``). Runs
    nothing; ``python -m guardpolicy recompiles`` runs the loop and proves a fix
    (docs/recompiles.md). Raises TypeError for an object ``guardpolicy.compile`` did not make."""
    from .tools.recompiles.command import report_of

    return report_of(compiled)


def capture(fn: Callable, *args: Any, **kwargs: Any):
    """The guard entries ``torch.compile`` offers for ``fn(*args, **kwargs)``: a
    ``Snapshot`` (``rows()``, ``to_json()``, ``table()``). Compiles with
    ``backend="eager"``, calls once, resets Dynamo before and after."""
    from .tools.capture import capture as _capture

    return _capture(fn, *args, **kwargs)


@dataclasses.dataclass
class AuditReport:
    """``guardpolicy.audit``'s result: one ``MutationAudit`` per policy (``audits``)."""

    audits: list

    def dangerous(self) -> dict[str, list]:
        """Per policy, the groups of dropped guards found dangerous."""
        return {a.policy: a.by_outcome("dangerous") for a in self.audits}

    def to_dict(self) -> dict[str, Any]:
        return {"policies": [a.to_dict() for a in self.audits]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def table(self) -> str:
        return "\n\n".join(a.table() for a in self.audits)

    def __str__(self) -> str:
        return self.table()


def audit(model: Callable, args: tuple | list = (), kwargs: dict | None = None, *,
          policies: Iterable[Any] = DEFAULT_AUDIT_POLICIES, backend: str = "eager", label: str = "model",
          progress: Callable[[str], None] | None = None) -> AuditReport:
    """The guard-driven mutation audit (``guardpolicy.tools.mutation``) of each policy in
    ``policies`` (``Policy`` objects, std policy names or policy files) on
    ``model(*args, **kwargs)``: per policy, each group of dropped guards is dangerous,
    caught, harmless or not mutated."""
    from .tools import mutation

    return AuditReport([mutation.audit(model, tuple(args), kwargs, p, label=label, backend=backend,
                                       progress=progress) for p in policies])


@dataclasses.dataclass
class SuggestReport:
    """``guardpolicy.suggest``'s result: ``text`` (the policy, ready for ``guardpolicy.load``),
    ``findings`` (per audited guard: name, guard_type, path, verdict, values tried, decision),
    ``timing`` (per backend, the rows of no filter and the policy, one torch thread; empty
    unless ``bench_backends``), ``suggestion`` (the tool's full result, with the audit)."""

    text: str
    findings: list[dict]
    timing: dict[str, list[dict]]
    suggestion: Any

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.text, "findings": self.findings, "timing": self.timing}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def table(self) -> str:
        from .tools import suggest as _suggest

        return _suggest.report(self.suggestion, "(not written)")

    def __str__(self) -> str:
        return self.table()


def suggest(model: Callable, *args: Any, backend: str = "eager", verify: int | None = 100, name: str = "suggested",
            bench_backends: Iterable[str] = (), calls: int = 200, model_kwargs: dict | None = None,
            progress: Callable[[str], None] | None = None, budget: float | None = None,
            **kwargs: Any) -> SuggestReport:
    """The policy ``python -m guardpolicy suggest`` writes, for ``model(*args, **kwargs)``:
    the mutation audit of every guard (each guarded value changed to boundary values, both
    directions), a policy that drops only the guards harmless on every value tried, with
    ``verify every N calls`` (``verify=None``: none). ``bench_backends``: time no filter
    against it there, one torch thread. ``budget``: seconds after which the audit tries no
    further change (the states not finished are kept). The options are keyword-only; a model keyword with
    the same name as one goes in ``model_kwargs``. The model and its inputs are left as
    they were (``NotRepeatableError`` when two eager calls differ, ``AuditStateError`` when
    the final check fails; ``ValueError`` when the policy fails its own checks)."""
    from .tools import suggest as _suggest

    s = _suggest.suggest(model, tuple(args), {**kwargs, **(model_kwargs or {})}, name=name, backend=backend,
                         bench_backends=tuple(bench_backends), calls=calls, verify=verify, progress=progress,
                         budget=budget)
    drop = set(s.dropped)
    findings = [{"name": g.name, "guard_type": g.guard_type, "path": g.path, "verdict": grp.verdict(g.guard_type),
                 "values_tried": grp.tried(g.guard_type),
                 "decision": "drop" if (g.name, g.guard_type) in drop else "keep"}
                for grp in s.audit.groups for g in grp.guards]
    return SuggestReport(s.text, findings, s.bench, s)


@dataclasses.dataclass
class BenchReport:
    """``guardpolicy.bench``'s result: per backend, one row per variant (``eager``, ``no
    filter``, each policy through ``guardpolicy.compile``): median and p90 µs per call and
    the ratio of medians to no filter."""

    tables: dict[str, list[dict]]
    stamp: str

    def row(self, backend: str, variant: str) -> dict:
        return next(r for r in self.tables[backend] if r["variant"] == variant)

    def to_dict(self) -> dict[str, Any]:
        return {"stamp": self.stamp, "backends": self.tables}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def table(self) -> str:
        from .tools import latency

        out = [f"Per-call latency ({self.stamp}):"]
        for backend, rows in self.tables.items():
            out += ["", backend, *latency.table(rows, twins=False)]
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def bench(model: Callable, args: tuple | list = (), kwargs: dict | None = None, *, policies: Iterable[Any] = (),
          backends: Iterable[str] = ("eager",), calls: int = 300, block: int = 20) -> BenchReport:
    """Per-call latency of ``model(*args, **kwargs)``: eager, ``torch.compile`` with no
    filter, and each policy (``Policy``, std name or file) through ``guardpolicy.compile``,
    per backend, interleaved (``guardpolicy.tools.latency``)."""
    from .tools import latency

    loaded = [latency.as_policy(p) for p in policies]
    tables = {b: latency.measure_model(model, tuple(args), dict(kwargs or {}), loaded, b, calls, block)
              for b in backends}
    return BenchReport(tables, latency.stamp(calls, block))
