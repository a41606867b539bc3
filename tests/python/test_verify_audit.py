"""Verify on every stale cell of the soundness audit: the six standard policies on the two
audit models (guardpolicy.tools.audit: around the demo MLP, and around its tiny GPT-2), with
real torch.compile runs.

A GPT-2 compile costs about 3 s of CPU, so the audit's way (a fresh compile per cell) would
take over ten minutes here. One compiled object per (model, policy) serves every change
instead, with ``verify=10, on_violation="warn"``, in two passes:

1. **Per change, on the entry compiled for the original state.** The change is applied;
   the next call is not a sampled one, and runs under ``set_stance("fail_on_recompile")``,
   so it is what the policy serves without verify and classifies the cell as the audit does
   (``recompiled``: a kept guard failed, and torch refused to compile instead of compiling;
   ``stale``: no recompile, and the output differs from eager's). For a stale cell the same
   object then shows that verify=10 caught it within 10 calls (a ``StaleGuardWarning``
   naming a related dropped guard), and with ``verify_every=1, on_violation="raise"`` that
   the next call raises ``StaleGuardError`` naming a dropped guard related to the change.
   Then the change is undone and the model's state restored (``_Snapshot``), and a call
   verified against the full guard set (``verify_every=1``, ``raise``, no recompile
   allowed) proves the state is the compiled one again: every guard torch made passes, so
   the next change starts from an entry as fresh as a new compile's.
2. **Per stale cell, ``verify=1, on_violation="recompile"``**: the change is applied and
   the first changed call must be caught (a violation recorded, one compile more) and
   return eager's output. These run one after the other on the same object (the call
   compiles, which pass 1 must not): the first one on the entry compiled for the original
   state, each later one on the entry the previous one compiled (for the previous change's
   state, so that its dropped guards fail too); each is a first changed call whose stale
   entry verify must invalidate, and pass 1 already proved on the clean entry which guard
   names the change.

A stale cell verify does not catch must be one torch itself does not guard: the same change
with no guard_filter_fn at all is just as stale (the audit's control).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools import audit

#: What torch raises under ``set_stance("fail_on_recompile")`` when a kept guard fails.
_REFUSED = re.compile(r"Detected recompile when torch\.compile stance is 'fail_on_recompile'")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclasses.dataclass
class Outcome:
    change: str
    outcome: str = ""  # recompiled, unaffected, stale, error, n/a (as the audit classifies)
    caught_after: int | None = None  # calls after the change until verify=10 caught it
    warned_guards: list = dataclasses.field(default_factory=list)
    raised_guards: list | None = None
    recompiled_output_ok: bool | None = None
    recompile_problem: str = ""
    torch_own: bool | None = None  # uncaught: as stale with no guard_filter_fn at all


class _Snapshot:
    """The state of an audit model that its changes touch (every module's ``__dict__``,
    submodules, parameters, buffers and their values, ``training``; the cells of the
    closures it holds), restored object for object (so that identity guards pass again)."""

    def __init__(self, model):
        self.modules = [(m, dict(m.__dict__), dict(m._modules), dict(m._parameters), dict(m._buffers), m.training)
                        for m in model.modules()]
        self.values = [(b, b.detach().clone()) for b in model.buffers()]
        self.cells = [(cell, cell.cell_contents) for value in vars(model).values()
                      for cell in (getattr(value, "__closure__", None) or ())]

    def restore(self) -> None:
        for m, attrs, mods, params, bufs, training in self.modules:
            for key in [k for k in m.__dict__ if k not in attrs]:
                del m.__dict__[key]
            for key, value in attrs.items():
                if m.__dict__.get(key, _MISSING) is not value:
                    m.__dict__[key] = value
            for now, then in ((m._modules, mods), (m._parameters, params), (m._buffers, bufs)):
                if [(k, id(v)) for k, v in now.items()] != [(k, id(v)) for k, v in then.items()]:
                    now.clear()
                    now.update(then)
            m.training = training
        with torch.no_grad():
            for buffer, value in self.values:
                if not torch.equal(buffer, value):
                    buffer.copy_(value)
        for cell, value in self.cells:
            if cell.cell_contents is not value:
                cell.cell_contents = value


_MISSING = object()


def _names(guards):
    return [(g.name, g.guard_type) for g in guards]


class Session:
    """One compiled object of one policy on one audit model (see the module docstring)."""

    def __init__(self, model_name: str, policy):
        torch._dynamo.reset()
        self.model, self.inputs = audit.build_audit_model(model_name)
        self.opt = gp.compile(self.model, policy, backend="eager", verify=10, on_violation="warn")
        self.st = gp.stats(self.opt)
        with torch.no_grad():
            self.ref = self.model(*self.inputs)
            for _ in range(2):
                assert audit.compare(self.opt(*self.inputs), self.ref) is None
        assert self.st.compiles == 1 and not self.st.violations
        self.snapshot = _Snapshot(self.model)

    def trial(self) -> audit.Trial:
        return audit.Trial(self.model, self.inputs, torch.no_grad)

    def call(self, trial):
        with trial.grad_mode():
            return self.opt(*trial.inputs)

    def eager(self, trial):
        with trial.grad_mode():
            return self.model(*trial.inputs)

    def undo(self, trial) -> None:
        for undo in reversed(trial.undo):
            undo()
        trial.undo.clear()
        self.snapshot.restore()

    def set(self, every: int, action: str) -> None:
        self.st.verify_every, self.st.on_violation = every, action

    def check_restored(self) -> None:
        """The original state again: every guard of the entry passes (verified, nothing
        recompiles) and the output is the first call's."""
        self.set(1, "raise")
        violations = len(self.st.violations)
        with torch.no_grad(), torch.compiler.set_stance("fail_on_recompile"):
            out = self.opt(*self.inputs)
        assert len(self.st.violations) == violations and audit.compare(out, self.ref) is None
        self.set(10, "warn")

    # -- pass 1 ---------------------------------------------------------------------------

    def classify(self, change) -> Outcome:
        out = Outcome(change.key)
        if (self.st.calls + 1) % 10 == 0:  # the changed call must not be a sampled one
            with torch.no_grad():
                self.opt(*self.inputs)
        trial = self.trial()
        try:
            change.apply(trial)
            try:
                ref = self.eager(trial)
            except Exception:  # noqa: BLE001 - eager cannot run the change
                out.outcome = "n/a"
                return out
            compiles, violations = self.st.compiles, len(self.st.violations)
            try:
                with torch.compiler.set_stance("fail_on_recompile"):
                    first = self.call(trial)
            except Exception as e:  # noqa: BLE001
                out.outcome = "recompiled" if _REFUSED.search(str(e)) else "error"
                return out
            assert self.st.compiles == compiles and len(self.st.violations) == violations
            out.outcome = "unaffected" if audit.compare(first, ref) is None else "stale"
            if out.outcome == "stale":
                self._caught(trial, out, violations)
            return out
        finally:
            self.undo(trial)
            self.check_restored()

    def _caught(self, trial, out: Outcome, violations: int) -> None:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for n in range(2, 11):
                self.call(trial)
                if len(self.st.violations) > violations:
                    out.caught_after = n
                    break
        if out.caught_after is None:
            return
        out.warned_guards = _names(self.st.violations[violations].guards)
        warned = [w for w in record if issubclass(w.category, gp.StaleGuardWarning)]
        expected = sum(max(1, len(v.guards)) for v in self.st.violations[violations:])
        assert len(warned) == expected, [str(w.message) for w in record]  # one warning per guard
        self.set(1, "raise")
        try:
            self.call(trial)
        except gp.StaleGuardError as e:
            out.raised_guards = _names(e.violation.guards)
        self.set(10, "warn")

    # -- pass 2 ---------------------------------------------------------------------------

    def recompile(self, change, out: Outcome) -> None:
        self.set(1, "recompile")
        trial = self.trial()
        try:
            change.apply(trial)
            ref = self.eager(trial)
            compiles, violations = self.st.compiles, len(self.st.violations)
            got = self.call(trial)
            if len(self.st.violations) != violations + 1 or self.st.violations[-1].action != "recompile":
                out.recompile_problem = "no violation recorded"
            elif self.st.compiles != compiles + 1:
                out.recompile_problem = f"{self.st.compiles - compiles} compiles instead of 1"
            out.recompiled_output_ok = audit.compare(got, ref) is None
        finally:
            self.undo(trial)


@functools.lru_cache(maxsize=None)
def _control_stale(model_name: str, change_key: str) -> bool:
    """The same change with no guard_filter_fn at all is just as stale."""
    change = {c.key: c for c in audit.CHANGES}[change_key]
    torch._dynamo.reset()
    model, inputs = audit.build_audit_model(model_name)
    opt = torch.compile(model, backend="eager")
    trial = audit.Trial(model, inputs, torch.no_grad)
    try:
        with torch.no_grad():
            opt(*inputs)
        change.apply(trial)
        with trial.grad_mode():
            ref = model(*trial.inputs)
            return audit.compare(opt(*trial.inputs), ref) is not None
    finally:
        for undo in reversed(trial.undo):
            undo()
        torch._dynamo.reset()


def _run_policy(model_name, policy) -> list[Outcome]:
    by_key = {c.key: c for c in audit.CHANGES}
    # Pass 2 compiles once per stale cell, in one frame: past torch's recompile_limit (8),
    # the frame would run eagerly (and look right) instead of compiling.
    with torch._dynamo.config.patch(recompile_limit=64, accumulated_recompile_limit=1024):
        session = Session(model_name, policy)
        outcomes = [session.classify(change) for change in audit.CHANGES]
        for o in outcomes:
            if o.outcome == "stale" and o.caught_after is not None:
                session.recompile(by_key[o.change], o)
    torch._dynamo.reset()
    for o in outcomes:
        if o.outcome == "stale" and o.caught_after is None:
            o.torch_own = _control_stale(model_name, o.change)
    return outcomes


@pytest.mark.soak
@pytest.mark.parametrize("model_name", ["mlp", "gpt2"])
@pytest.mark.parametrize("policy_name", gp.STD_POLICIES)
def test_every_stale_cell_is_caught(model_name, policy_name):
    outcomes = _run_policy(model_name, gp.load_std(policy_name))
    by_key = {c.key: c for c in audit.CHANGES}
    stale = [o for o in outcomes if o.outcome == "stale"]
    problems = []
    for o in stale:
        change = by_key[o.change]
        if o.caught_after is None:
            if not o.torch_own:
                problems.append(f"{o.change}: stale, not caught by verify=10, and torch guards it")
            continue
        if not (2 <= o.caught_after <= 10):  # the changed call itself (1) is never sampled here
            problems.append(f"{o.change}: caught after {o.caught_after} calls")
        if not audit.related_guards(change, o.warned_guards):
            problems.append(f"{o.change}: warned guards {o.warned_guards} unrelated to the change")
        if o.raised_guards is None or not audit.related_guards(change, o.raised_guards):
            problems.append(f"{o.change}: raise named {o.raised_guards}")
        if o.recompile_problem or not o.recompiled_output_ok:
            problems.append(f"{o.change}: verify=1 recompile: {o.recompile_problem or 'not eager output'}")
    assert not problems, "\n".join(problems)
    caught = [o.change for o in stale if o.caught_after is not None]
    assert caught, "every std policy lets some change of the audit model go stale, and verify catches it"
