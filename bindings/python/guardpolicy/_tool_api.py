"""``guardpolicy.capture``, ``guardpolicy.audit`` and ``guardpolicy.bench``: the Python face of
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
