"""Verify on every stale cell of the soundness audit: the six standard policies on the audit
model around the demo MLP (guardpolicy.tools.audit), with real torch.compile runs. (The GPT-2
audit model costs about 3 s of CPU per compile, and this needs ~25 compiles per policy: it
is not run here.)

Per (model, policy, change), one compiled object with ``verify=10, on_violation="warn"``:
the first call after the change is not a sampled one, so it is what the policy serves
without verify, which classifies the cell as the audit does (stale: no recompile and the
output differs from eager's). For a stale cell, the same object then shows that verify=10
caught it within 10 calls (a warning naming a related dropped guard) and that
``on_violation="raise"`` raises ``StaleGuardError`` naming a dropped guard related to the
change; a second object with ``verify=1, on_violation="recompile"`` returns eager's output
on the first changed call. A stale cell verify does not catch must be one torch itself does
not guard: the same change with no guard_filter_fn at all is just as stale.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools import audit


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclasses.dataclass
class Outcome:
    change: str
    stale: bool = False
    caught_after: int | None = None  # calls after the change until verify=10 caught it
    warned_guards: list = dataclasses.field(default_factory=list)
    raised_guards: list | None = None
    recompiled_output_ok: bool | None = None
    torch_own: bool | None = None  # uncaught: as stale with no guard_filter_fn at all


def _start(model_name, policy, **kwargs):
    torch._dynamo.reset()
    model, inputs = audit.build_audit_model(model_name)
    opt = gp.compile(model, policy, backend="eager", **kwargs) if policy is not None else \
        torch.compile(model, backend="eager")
    trial = audit.Trial(model, inputs, torch.no_grad)
    with torch.no_grad():
        opt(*inputs)
        opt(*inputs)
    return model, opt, trial


def _call(opt, trial):
    with trial.grad_mode():
        return opt(*trial.inputs)


def _eager(model, trial):
    with trial.grad_mode():
        return model(*trial.inputs)


def _undo(trial):
    for undo in reversed(trial.undo):
        undo()
    trial.undo.clear()


def _names(guards):
    return [(g.name, g.guard_type) for g in guards]


def _related(change, guards):
    return audit.related_guards(change, _names(guards))


def _run_cell(model_name, policy, change) -> Outcome:
    out = Outcome(change.key)
    model, opt, trial = _start(model_name, policy, verify=10, on_violation="warn")
    st = gp.stats(opt)
    try:
        change.apply(trial)
        try:
            ref = _eager(model, trial)
        except Exception:  # noqa: BLE001 - eager cannot run the change: n/a
            return out
        compiles = st.compiles
        try:
            first = _call(opt, trial)  # call 3: not sampled
        except Exception:  # noqa: BLE001 - the stale code raised: an `error` cell, not stale
            return out
        out.stale = st.compiles == compiles and audit.compare(first, ref) is not None
        if not out.stale:
            return out
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for n in range(2, 11):
                _call(opt, trial)
                if st.violations:
                    out.caught_after = n
                    break
        out.warned_guards = _names(st.violations[0].guards) if st.violations else []
        if st.violations:
            assert any(issubclass(w.category, gp.StaleGuardWarning) for w in record)
        st.verify_every, st.on_violation = 1, "raise"
        try:
            _call(opt, trial)
        except gp.StaleGuardError as e:
            out.raised_guards = _names(e.violation.guards)
    finally:
        _undo(trial)
    if out.caught_after is None:
        out.torch_own = _control_stale(model_name, change)
        return out
    model, opt, trial = _start(model_name, policy, verify=1, on_violation="recompile")
    try:
        change.apply(trial)
        ref = _eager(model, trial)
        out.recompiled_output_ok = audit.compare(_call(opt, trial), ref) is None
    finally:
        _undo(trial)
    return out


def _control_stale(model_name, change) -> bool:
    model, opt, trial = _start(model_name, None)
    try:
        change.apply(trial)
        ref = _eager(model, trial)
        return audit.compare(_call(opt, trial), ref) is not None
    finally:
        _undo(trial)
        torch._dynamo.reset()


@pytest.mark.soak
@pytest.mark.parametrize("model_name", ["mlp"])
@pytest.mark.parametrize("policy_name", gp.STD_POLICIES)
def test_every_stale_cell_is_caught(model_name, policy_name):
    policy = gp.load_std(policy_name)
    outcomes = [_run_cell(model_name, policy, change) for change in audit.CHANGES]
    torch._dynamo.reset()
    by_key = {c.key: c for c in audit.CHANGES}
    stale = [o for o in outcomes if o.stale]
    problems = []
    for o in stale:
        change = by_key[o.change]
        if o.caught_after is None:
            if not o.torch_own:
                problems.append(f"{o.change}: stale, not caught by verify=10, and torch guards it")
            continue
        if not (1 <= o.caught_after <= 10):
            problems.append(f"{o.change}: caught after {o.caught_after} calls")
        if not audit.related_guards(change, o.warned_guards):
            problems.append(f"{o.change}: warned guards {o.warned_guards} unrelated to the change")
        if o.raised_guards is None or not audit.related_guards(change, o.raised_guards):
            problems.append(f"{o.change}: raise named {o.raised_guards}")
        if not o.recompiled_output_ok:
            problems.append(f"{o.change}: verify=1 recompile did not return eager's output")
    assert not problems, "\n".join(problems)
    caught = [o.change for o in stale if o.caught_after is not None]
    assert caught, "every std policy lets some change of the audit model go stale, and verify catches it"
