"""guardpolicy: guard-filter policies for ``torch.compile``.

    import guardpolicy as gp
    policy = gp.load("serving.gpol")            # raises gp.PolicyError with diagnostics
    opt = torch.compile(model, options={"guard_filter_fn": policy})

Importing guardpolicy does not import torch. ``gp.capture``, ``gp.audit``, ``gp.suggest`` and ``gp.bench``
run the tools of ``guardpolicy.tools`` (which need torch) on the caller's model.
"""

from __future__ import annotations

from ._core import __version__
from .api.errors import (Diagnostic, PluginError, PolicyError, PolicyRuntimeWarning, RankMismatchError, StaleGuardError,
                     StaleGuardWarning, StanceRecompileWarning)
from .runtime.frames import CompiledFrame, FrameExplanations
from .api.policy import Explanation, Policy, RuleRef
from .api.registry import (  # noqa: A004 - guardpolicy.filter, as designed
    EXAMPLE_PLUGINS,
    FilterInfo,
    FilterParam,
    PluginInfo,
    example_plugin_path,
    filter,
    filters,
    load_plugin,
    plugins,
)
from .api.loading import DATA_DIR, SAFE_POLICIES, STD_POLICIES, lint, load, load_std, std_policy_path
from .runtime.verify import FailedGuard, Verdict, Violation
from .runtime.dry_run import DryRunEvent, DryRunReport, report as dry_run_report
from .runtime.compiled import (CompileStats, compile, compile_repeated_blocks,  # noqa: A004 - guardpolicy.compile
                                explain, stats)
from .reports import AuditReport, BenchReport, SuggestReport, audit, bench, capture, doctor, recompiles, suggest
from .runtime.serving.cache_file import CacheFileError, CacheLoad, CacheMismatch, load_cache, save_cache
from .runtime.serving.check import EntryCheck, WouldRecompile, would_recompile
from .runtime.serving.coverage import Coverage, CoverageRow, coverage
from .runtime.serving.naming import GuardFailure
from .runtime.serving.scope import ServeTimeCompile, serving
from . import moved

moved.install()

__all__ = [
    "__version__",
    "AuditReport",
    "BenchReport",
    "CacheFileError",
    "CacheLoad",
    "CacheMismatch",
    "DATA_DIR",
    "EXAMPLE_PLUGINS",
    "CompileStats",
    "CompiledFrame",
    "Coverage",
    "CoverageRow",
    "Diagnostic",
    "DryRunEvent",
    "DryRunReport",
    "EntryCheck",
    "Explanation",
    "FilterInfo",
    "FrameExplanations",
    "FailedGuard",
    "FilterParam",
    "GuardFailure",
    "PluginError",
    "PluginInfo",
    "Policy",
    "PolicyError",
    "PolicyRuntimeWarning",
    "RankMismatchError",
    "RuleRef",
    "SAFE_POLICIES",
    "ServeTimeCompile",
    "STD_POLICIES",
    "StaleGuardError",
    "StaleGuardWarning",
    "StanceRecompileWarning",
    "SuggestReport",
    "audit",
    "bench",
    "capture",
    "compile",
    "compile_repeated_blocks",
    "coverage",
    "doctor",
    "dry_run_report",
    "example_plugin_path",
    "explain",
    "filter",
    "filters",
    "lint",
    "load",
    "load_cache",
    "load_plugin",
    "load_std",
    "plugins",
    "save_cache",
    "serving",
    "recompiles",
    "stats",
    "std_policy_path",
    "suggest",
    "Verdict",
    "Violation",
    "WouldRecompile",
    "would_recompile",
]
