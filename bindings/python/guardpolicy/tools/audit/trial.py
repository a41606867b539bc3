"""One trial of the audit: compile the audit model under one policy (or none: the control),
call it, apply one change, call again, and classify that call as a ``Cell``
(``run_trial``); the same change under ``gp.compile(verify=N)`` (``verify_trial``)."""

from __future__ import annotations

import re
from typing import Any, Callable

from ...runtime import torch_internals
from ...runtime.compiled import stats
from ..common.compare import compare
from ..common.recording import Recording
from .changes import Change, Trial
from .model import build_audit_model
from .results import RECOMPILED_WRONG, Cell


def _frames_ok() -> int:
    return int(torch_internals.counters()["frames"]["ok"])


#: Guard types that check presence or emptiness rather than the value a change alters:
#: listed after the others when a cell names its dropped guards.
_SECONDARY_TYPES = ("NOT_PRESENT_IN_GENERIC_DICT", "EMPTY_NN_MODULE_HOOKS_DICT", "HASATTR", "DICT_CONTAINS")


def related_guards(change: Change, dropped: list[tuple[str, str]]) -> list[dict]:
    """The dropped guards that relate to ``change`` (see ``Change``), each once: value,
    type and identity guards first, presence and empty-hook-dict guards last, otherwise in
    offer order."""
    pats = [re.compile(p) for p in change.names]
    seen, out = set(), []
    for name, gtype in dropped:
        hit = any(p.search(name) for p in pats) or (name == "" and gtype in change.guard_types)
        if hit and (name, gtype) not in seen:
            seen.add((name, gtype))
            out.append({"name": name, "guard_type": gtype})
    return sorted(out, key=lambda g: g["guard_type"] in _SECONDARY_TYPES)


def warmup_calls(policy) -> int:
    """Quiet calls after which the policy's ``stance skip_guard_eval_unsafe after N calls``
    line switches guard evaluation off (0 without such a line)."""
    return getattr(policy, "stance_warmup", None) or 0


def run_trial(model_name: str, policy: Callable | None, change: Change,
              config: dict | None = None) -> tuple[Cell, Any]:
    """Builds, compiles, calls once, applies ``change``, calls again and classifies the
    second call (see ``guardpolicy.tools.audit``'s docstring). Returns the cell and the
    recorder (None without a policy).

    A ``guardpolicy.Policy`` is compiled with ``guardpolicy.compile``, so that its ``config``
    lines apply and its ``stance ... after N calls`` line too (the model is then called N
    more times before the change, to reach the steady state); any other callable is passed
    to ``torch.compile`` as ``guard_filter_fn`` inside a ``recording.Recording``; None compiles
    with no filter at all (the control). ``config``: Dynamo config settings (``torch_internals.config_patch``) for
    the whole trial (the control of a policy with ``config`` lines runs under them)."""
    import torch

    if config:
        with torch_internals.config_patch(**config):
            return run_trial(model_name, policy, change)

    from ...api.policy import Policy
    from ...runtime.compiled import compile as policy_compile

    torch.compiler.reset()
    model, inputs = build_audit_model(model_name)
    if policy is None:
        recorder = None
        compiled = torch.compile(model, backend="eager")
    elif isinstance(policy, Policy):
        recorder = Recording(policy)
        compiled = policy_compile(model, recorder.policy(policy), backend="eager")
    else:
        recorder = Recording(policy)
        compiled = torch.compile(model, backend="eager", options={"guard_filter_fn": recorder})
    trial = Trial(model, inputs, torch.no_grad)
    try:
        with torch.no_grad():
            ref = model(*inputs)
            try:
                first = compiled(*inputs)
                for _ in range(warmup_calls(policy)):
                    compiled(*inputs)
            except Exception as e:  # noqa: BLE001 - reported as the cell, the audit goes on
                return Cell(change.key, "error", f"first call raised {type(e).__name__}: {_short(e)}"), recorder
        problem = compare(first, ref)
        if problem:
            return Cell(change.key, "error", f"differs from eager before any change: {problem}"), recorder
        if recorder is not None:
            recorder.stop_recording()
        frames_before = recorder.frames if recorder is not None else _frames_ok()

        change.apply(trial)
        try:
            with trial.grad_mode():
                ref = model(*trial.inputs)
        except Exception as e:  # noqa: BLE001 - eager cannot run this change: nothing to audit
            return Cell(change.key, "n/a", f"eager raised {type(e).__name__}: {_short(e)}"), recorder
        error = None
        try:
            with trial.grad_mode():
                out = compiled(*trial.inputs)
        except Exception as e:  # noqa: BLE001 - a stale graph may crash on the new state
            error = e
        frames_after = recorder.frames if recorder is not None else _frames_ok()
        recompiled = frames_after > frames_before
        if error is not None and _REFUSED_RECOMPILE.search(str(error)):
            # A guard failed, and the skip_guard_eval_unsafe stance raised instead of compiling.
            return Cell(change.key, "recompiled", f"a guard failed; the stance refused to recompile "
                                                  f"({type(error).__name__})"), recorder
        if recompiled:  # a detail here means the recompiled code is wrong: soundness_findings reports it
            if error is not None:
                detail = f"{RECOMPILED_WRONG} raised {type(error).__name__}: {_short(error)}"
            else:
                problem = compare(out, ref)
                detail = f"{RECOMPILED_WRONG} differs from eager: {problem}" if problem else ""
            return Cell(change.key, "recompiled", detail), recorder
        if error is not None:
            return Cell(change.key, "error", f"{type(error).__name__}: {_short(error)}"), recorder
        problem = compare(out, ref)
        if problem is None:
            return Cell(change.key, "unaffected"), recorder
        return Cell(change.key, "stale", problem), recorder
    finally:
        _restore(trial)


#: What torch raises when a guard fails under ``set_stance(skip_guard_eval_unsafe=True)``
#: (or ``fail_on_recompile``): caught, not silent.
_REFUSED_RECOMPILE = re.compile(r"Recompilation triggered with skip_guard_eval_unsafe stance|"
                                r"Detected recompile when torch\.compile stance is 'fail_on_recompile'")


def _short(e: BaseException, limit: int = 160) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verify_trial(model_name: str, policy, change: Change, every: int) -> dict:
    """The same change under ``guardpolicy.compile(..., verify=every,
    on_violation="recompile")``: ``{"every", "caught", "after_calls", "output_ok"}``, where
    ``after_calls`` counts the calls after the change up to the one verify caught (at most
    ``every``: sampling is by call count) and ``output_ok`` says whether that call returned
    eager's output. On an ``error`` cell the calls before the sampled one run the stale code,
    which raises: those calls count, and the audit goes on to the sampled one."""
    import torch

    from ...runtime.compiled import compile as policy_compile

    torch.compiler.reset()
    model, inputs = build_audit_model(model_name)
    compiled = policy_compile(model, policy, backend="eager", verify=every, on_violation="recompile")
    trial = Trial(model, inputs, torch.no_grad)
    out = {"every": every, "caught": False, "after_calls": None, "output_ok": None}
    try:
        with torch.no_grad():
            compiled(*inputs)
            for _ in range(warmup_calls(policy)):
                compiled(*inputs)
        change.apply(trial)
        st = stats(compiled)
        for n in range(1, every + 1):
            with trial.grad_mode():
                ref = model(*trial.inputs)
                try:
                    got, raised = compiled(*trial.inputs), False
                except Exception:  # noqa: BLE001 - the stale code of an error cell raises
                    got, raised = None, True
            if st.violations:
                out.update(caught=True, after_calls=n, output_ok=not raised and compare(got, ref) is None)
                break
    finally:
        _restore(trial)
    return out


def _restore(trial: Trial) -> None:
    """Undoes what the trial's change did outside the model (last first) and resets Dynamo."""
    import torch

    for undo in reversed(trial.undo):
        undo()
    torch.compiler.reset()
