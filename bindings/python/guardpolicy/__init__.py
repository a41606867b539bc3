"""guardpolicy: guard-filter policies for ``torch.compile``.

    import guardpolicy as gp
    policy = gp.load("serving.gpol")            # raises gp.PolicyError with diagnostics
    opt = torch.compile(model, options={"guard_filter_fn": policy})

Importing guardpolicy does not import torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import _core
from .errors import Diagnostic, PluginError, PolicyError, PolicyRuntimeWarning, require_str
from .frames import CompiledFrame, FrameExplanations
from .policy import Explanation, Policy, RuleRef
from .registry import (  # noqa: A004 - guardpolicy.filter, as designed
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
from .runtime import PolicyCompiled, compile, explain  # noqa: A004 - guardpolicy.compile, as designed

__all__ = [
    "DATA_DIR",
    "EXAMPLE_PLUGINS",
    "CompiledFrame",
    "Diagnostic",
    "Explanation",
    "FilterInfo",
    "FrameExplanations",
    "FilterParam",
    "PluginError",
    "PluginInfo",
    "Policy",
    "PolicyError",
    "PolicyRuntimeWarning",
    "PolicyCompiled",
    "RuleRef",
    "STD_POLICIES",
    "compile",
    "example_plugin_path",
    "explain",
    "filter",
    "filters",
    "lint",
    "load",
    "load_plugin",
    "load_std",
    "plugins",
    "std_policy_path",
]

#: Directory holding ``schema/guard_entry.yaml`` and ``std/*.gpol``.
DATA_DIR = Path(__file__).resolve().parent / "data"

#: The six torch built-in filters, as policies (``torch.compiler.<name>_unsafe``).
STD_POLICIES = (
    "skip_guard_on_inbuilt_nn_modules",
    "skip_guard_on_all_nn_modules",
    "keep_tensor_guards",
    "skip_guard_on_globals",
    "keep_portable_guards",
    "skip_all_guards",
)


def _source_args(path_or_source: str | os.PathLike) -> tuple[str, str, bool]:
    """(text, path, from_file): a PathLike or a string naming no newline is a path."""
    if isinstance(path_or_source, os.PathLike):
        return "", os.fspath(path_or_source), True
    if not isinstance(path_or_source, str):
        raise TypeError(f"expected a path or policy source text, got {type(path_or_source).__name__}")
    if "\n" in path_or_source or path_or_source.lstrip().startswith("guardpolicy "):
        return path_or_source, "<string>", False
    return "", path_or_source, True


def load(path_or_source: str | os.PathLike, *, policy: str | None = None, **params: Any) -> Policy:
    """Parses, checks, compiles and verifies a policy.

    ``path_or_source`` is a ``.gpol`` path, a ``.gpolc`` artifact (from ``guardpolicy
    compile`` or ``Policy.save``; verified on load, parameters already bound), or the
    policy text itself. A file with several
    policies needs ``policy="name"``. ``params`` bind the policy's parameters (bool, int or
    str), e.g. ``load("keep_tensor_guards.gpol", keep_parameters=True)``.

    Raises ``PolicyError`` carrying every diagnostic (file:line:col) when anything is wrong,
    including a missing or unreadable file.
    """
    text, path, from_file = _source_args(path_or_source)
    if policy is not None:
        require_str(policy, "policy")
    return Policy(_core.load(text, os.fsencode(path), from_file, policy or "", params, str(DATA_DIR)))


def std_policy_path(name: str) -> Path:
    """Path of a standard policy file, e.g. ``std_policy_path("skip_all_guards")``."""
    require_str(name, "name")
    if name not in STD_POLICIES:
        raise KeyError(f"no standard policy {name!r}; known: {', '.join(STD_POLICIES)}")
    return DATA_DIR / "std" / f"{name}.gpol"


def load_std(name: str, **params: Any) -> Policy:
    """Loads one of ``STD_POLICIES`` (the torch built-in filters written as policies)."""
    return load(std_policy_path(name), **params)


def lint(path_or_source: str | os.PathLike) -> list[Diagnostic]:
    """Every diagnostic (errors and warnings) for a policy file or text; never raises on
    author mistakes."""
    text, path, from_file = _source_args(path_or_source)
    return [Diagnostic(**d) for d in _core.lint(text, os.fsencode(path), from_file, str(DATA_DIR))]
