"""The audit's matrix: every change of ``CHANGES`` under each policy on each audit model
(``audit_policy``, ``run_audit``), stale and error cells checked against the control (the
same change with no ``guard_filter_fn``); the policies as ``resolve_policy`` loads them."""

from __future__ import annotations

import os
import warnings
from collections import Counter
from typing import Callable

from ...api.data import example_policy
from ...api.loading import STD_POLICIES, load, load_policy, load_std
from .changes import CHANGES, Change
from .results import PolicyAudit
from .trial import related_guards, run_trial, verify_trial, warmup_calls

#: Default policies: the six standard ones, then ``keep_all``.
DEFAULT_POLICIES = (*STD_POLICIES, "keep_all")


def resolve_policy(spec: str):
    """``(label, source, policy)`` for a standard policy name (``watch_state`` too),
    ``keep_all``, or a policy file (``.gpol``/``.gpolc``)."""
    if spec in STD_POLICIES:
        return spec, spec, load_std(spec)
    if spec == "keep_all" and not os.path.exists(spec):
        return "keep_all", "keep_all", load(example_policy("keep_all"))  # the installed control
    policy = load_policy(spec)  # a file, or a safe standard policy's name (watch_state)
    return policy.name, spec, policy


def audit_policy(model_name: str, label: str, source: str, policy, changes=CHANGES,
                 progress: Callable[[str], None] | None = None,
                 controls: dict | None = None, verify_every: int = 0) -> PolicyAudit:
    """Runs every change of ``changes`` under ``policy`` on ``model_name``.

    Every stale or error cell also gets ``control``: the same change with no
    ``guard_filter_fn`` at all (run once per model and change, cached in ``controls``), which
    tells a guard the policy dropped from a change torch itself does not guard."""
    controls = {} if controls is None else controls
    result = PolicyAudit(model_name, label, source, bool(getattr(policy, "is_unsafe", True)))
    result.settings = _settings(policy)
    for change in changes:
        if progress:
            progress(f"{model_name} · {label} · {change.key}")
        cell, rec = _quiet(run_trial, model_name, policy, change)
        if rec is not None and not result.frames:
            result.frames, result.offered, result.dropped = rec.first_frames, rec.offered, len(rec.dropped_guards)
        if cell.outcome in ("stale", "error"):
            if rec is not None:
                cell.guards = related_guards(change, rec.dropped_guards)
                if not cell.guards:
                    cell.dropped_types = dict(Counter(t for _, t in rec.dropped_guards).most_common())
            cell.control = _control(model_name, change, policy, controls, progress)
            if verify_every:
                if progress:
                    progress(f"{model_name} · {label} · {change.key} · verify={verify_every}")
                cell.verify = _quiet(verify_trial, model_name, policy, change, verify_every)
        result.cells.append(cell)
    return result


def _settings(policy) -> list[str]:
    """The policy's ``config`` and ``stance ... after N calls`` lines, as the table heads
    show them (``config recompile_limit = 64``)."""
    out = [f"config {k} = {v!r}" for k, v in (getattr(policy, "config", None) or {}).items()]
    if warmup_calls(policy):
        out.append(f"stance skip_guard_eval_unsafe after {warmup_calls(policy)} calls")
    return out


def _control(model_name: str, change: Change, policy, controls: dict,
             progress: Callable[[str], None] | None) -> str:
    """The control of a stale or error cell: ``change`` with no ``guard_filter_fn`` at all,
    under the policy's ``config`` lines (run once per model, change and config, cached in
    ``controls``), as ``"outcome"`` or ``"outcome (detail)"``."""
    config = dict(getattr(policy, "config", None) or {})
    key = (model_name, change.key, tuple(sorted(config.items())))
    if key not in controls:
        if progress:
            progress(f"{model_name} · (no guard_filter_fn) · {change.key}")
        controls[key], _ = _quiet(run_trial, model_name, None, change, config)
    control = controls[key]
    return control.outcome + (f" ({control.detail})" if control.detail else "")


def _quiet(fn: Callable, *args):
    """``fn(*args)`` with every warning silenced (torch warns on recompiles and the like)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def run_audit(models, policies, changes=CHANGES, progress=None,
              verify_every: int = 0) -> tuple[dict[str, list[PolicyAudit]], dict]:
    """``{model: [PolicyAudit per policy]}`` and the control cells (``(model, change)`` ->
    Cell with no guard_filter_fn) for ``policies`` given as ``resolve_policy`` triples;
    with ``verify_every``, each stale or error cell also says whether verify caught it."""
    controls: dict = {}
    results = {}
    for model_name in models:
        results[model_name] = [audit_policy(model_name, label, source, policy, changes, progress, controls,
                                            verify_every)
                               for label, source, policy in policies]
    return results, controls
