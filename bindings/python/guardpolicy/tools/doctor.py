"""``python -m guardpolicy doctor`` and ``guardpolicy.doctor()``: which features work on the
installed torch and Python, and for each that does not, the torch internal it lacks.

Every answer comes from the torch boundary (``guardpolicy.runtime.torch_internals``), which
feature-detects torch's private names, and from torch's public API; nothing is compiled.
``--json`` prints the same as JSON: docs/support.md is generated from the JSON of each CI leg
(docs/tools/gen_support.py), and tests/python/test_doctor.py checks, on each leg, that this
torch still answers as the committed JSON says.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature: its ``name`` (as docs/support.md spells it), whether it works here, and the
    torch names it needs and this torch lacks (empty when it works)."""

    name: str
    missing: tuple[str, ...] = ()

    @property
    def works(self) -> bool:
        return not self.missing


@dataclasses.dataclass(frozen=True)
class DoctorReport:
    """``guardpolicy.doctor()``'s result: the torch and Python versions and every ``Feature``."""

    torch: str
    python: str
    features: tuple[Feature, ...]

    def to_dict(self) -> dict:
        return {"torch": self.torch, "python": self.python,
                "features": {f.name: list(f.missing) for f in self.features}}

    def table(self) -> str:
        width = max(len(f.name) for f in self.features)
        lines = [f"guardpolicy doctor: torch {self.torch}, Python {self.python}"]
        for f in self.features:
            state = "works" if f.works else "needs " + ", ".join(f.missing)
            lines.append(f"  {f.name:<{width}}  {state}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _guard_filter_fn() -> list[str]:
    import torch

    return [] if hasattr(torch.compiler, "skip_guard_on_globals_unsafe") else [
        "torch.compile's guard_filter_fn option (torch 2.8)"]


def _config_lines() -> list[str]:
    from ..runtime import torch_internals as ti

    return [f"{ti.DYNAMO_CONFIG}.{k}" for k in ("install_free_tensors", "use_recursive_dict_tags_for_guards")
            if not ti.has_config(k)]


def _stance() -> list[str]:
    import torch

    from ..runtime import torch_internals as ti

    absent = ti.missing()
    return absent + ([] if hasattr(torch.compiler, "set_stance") else ["torch.compiler.set_stance"])


def _verify() -> list[str]:
    from ..runtime import torch_internals as ti

    return ti.missing() + ti.missing_for_verify()


def _dispatch() -> list[str]:
    from ..runtime import torch_internals as ti

    return ti.missing() + ti.dispatch_missing()


def _ranks() -> list[str]:
    import torch.distributed as dist

    if not dist.is_available():
        return ["torch.distributed (this torch was built without it)"]
    return [] if dist.is_gloo_available() else ["torch.distributed's gloo backend"]


def _code_field() -> list[str]:
    from ..runtime import torch_internals as ti

    return [] if ti.guard_code_source() else ["GuardFilterEntry.code_parts (2.15) or Guard.code_list"]


#: The features, in docs/support.md's order: (name, what it needs this torch to lack nothing of).
FEATURES: tuple[tuple[str, Callable[[], list[str]]], ...] = (
    ("policies as guard_filter_fn", _guard_filter_fn),
    ("config lines", _config_lines),
    ("stance", _stance),
    ("verify", _verify),
    ("dry-run", _verify),
    ("direct dispatch", _dispatch),
    ("many ranks", _ranks),
    ("code field", _code_field),
)


def doctor() -> DoctorReport:
    """What works on this torch and Python (see the module docstring)."""
    import torch

    features = []
    for name, check in FEATURES:
        try:
            missing = tuple(check())
        except Exception as e:  # noqa: BLE001 - a torch so different that the check itself fails
            missing = (f"{type(e).__name__}: {e}",)
        features.append(Feature(name, missing))
    return DoctorReport(torch.__version__, platform.python_version(), tuple(features))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guardpolicy doctor",
                                     description="Which guardpolicy features work on the installed torch.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = doctor()
    sys.stdout.write((json.dumps(report.to_dict(), indent=2) if args.json else report.table()) + "\n")
    return 0 if all(f.works for f in report.features) else 1
