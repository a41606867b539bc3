"""Loading policies: ``load``, ``load_std``, ``lint`` and the installed data (``DATA_DIR``).

A leaf module (it imports only ``_core``, ``errors`` and ``policy``), so every other module
of the package can import it at the top.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from .. import _core
from .data import DATA_DIR, SAFE_POLICIES, STD_POLICIES
from .errors import Diagnostic, PolicyError, require_str
from .policy import Policy, PolicyOrigin
from .registry import loaded_plugins



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
    try:
        compiled = _core.load(text, os.fsencode(path), from_file, policy or "", params, str(DATA_DIR))
    except PolicyError as e:
        if from_file and path in STD_POLICIES + SAFE_POLICIES and not os.path.exists(path):
            raise PolicyError(f"{str(e).rstrip()}\n  = help: `{path}` is a standard policy: "
                              f"gp.load_std({path!r}) loads it", [dataclasses.asdict(d) for d in e.diagnostics]) from None
        near = _near_standard(path) if from_file and not os.path.exists(path) else None
        if near is not None:
            raise PolicyError(f"{str(e).rstrip()}\n  = help: did you mean the standard policy `{near}`?",
                              [dataclasses.asdict(d) for d in e.diagnostics]) from None
        raise
    return Policy(compiled, _origin(text, path, from_file, policy or "", params))


def _near_standard(path: str) -> str | None:
    """The standard policy name ``path`` looks like a misspelling of (``watch_stat``), or None."""
    import difflib

    if os.sep in path or path.endswith((".gpol", ".gpolc")):
        return None
    found = difflib.get_close_matches(path, STD_POLICIES + SAFE_POLICIES, n=1, cutoff=0.8)
    return found[0] if found else None


def _origin(text: str, path: str, from_file: bool, policy: str, params: dict[str, Any]) -> PolicyOrigin:
    """How to load the policy again (pickling): the file's content as read now."""
    artifact = None
    if from_file:
        with open(path, "rb") as f:
            data = f.read()
        if _core.looks_like_artifact(data, path):
            artifact, text = data, None
        else:
            text = data.decode("utf-8")
    return PolicyOrigin(text=text, artifact=artifact, path=path, policy=policy,
                        params=tuple(sorted(params.items())), plugins=loaded_plugins())


def std_policy_path(name: str) -> Path:
    """Path of a standard policy file, e.g. ``std_policy_path("skip_all_guards")``."""
    require_str(name, "name")
    if name not in STD_POLICIES + SAFE_POLICIES:
        raise KeyError(f"no standard policy {name!r}; known: {', '.join(STD_POLICIES + SAFE_POLICIES)}")
    return DATA_DIR / "std" / f"{name}.gpol"


def load_std(name: str, **params: Any) -> Policy:
    """Loads one of ``STD_POLICIES`` (the torch built-in filters written as policies) or
    ``SAFE_POLICIES`` (``watch_state``)."""
    return load(std_policy_path(name), **params)


def load_policy(policy: Any) -> Policy:
    """``policy`` as a ``Policy``: itself, the safe standard policy of that name when it names
    one and no such file exists (``"watch_state"``; torch's unsafe ones are loaded only
    explicitly, with ``load_std``), else ``load(policy)``."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy in SAFE_POLICIES and not os.path.exists(policy):
        return load_std(policy)
    return load(policy)


def lint(path_or_source: str | os.PathLike) -> list[Diagnostic]:
    """Every diagnostic (errors and warnings) for a policy file or text; never raises on
    author mistakes."""
    text, path, from_file = _source_args(path_or_source)
    return [Diagnostic(**d) for d in _core.lint(text, os.fsencode(path), from_file, str(DATA_DIR))]
