"""The mutation audit judges the state a call writes, not only its output (issue 54).

A forward that does ``self.step += 1`` returns the same output whatever ``self.step`` is, but
with the guard on ``self.step`` dropped Dynamo replays the store of the constant it traced, so
the counter freezes: the audit calls that dangerous (``self.step is 1, eager wrote 2``) and
``suggest`` keeps the guard. A list the forward appends to (empty when the audit starts) is
grown by an item and gets a verdict; a constant written on every call (``self.last = 3``) and
a float read but not written (a dropout ``p`` in eval) stay harmless. ``suggest --from-run``
drops a guard that failed in the user's run when the audit proved it harmless on the values
the run gave it (a per-call ``run_id`` read by a dead branch), and keeps one whose run value
is dangerous. ``audit --policy A --policy B`` audits both.

Everything runs on the eager backend with tiny modules; the model and its state are checked
unchanged after every audit.
"""

from __future__ import annotations

import json

import pytest
import torch

from guardpolicy.tools import audit as audit_cli
from guardpolicy.tools import suggest as suggest_cli
from guardpolicy.tools.mutation import run as mutation
from guardpolicy.tools.suggest import command as suggest


class Counter(torch.nn.Module):
    """A step counter, a history list, a constant written per call, a float read only."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.step = 0
        self.history = []
        self.last = None
        self.p = 0.25

    def forward(self, x):
        self.step += 1
        self.history.append(x.sum())
        self.last = 3
        return torch.nn.functional.dropout(self.lin(x), self.p, training=False)


class Counts(torch.nn.Module):
    """A history list the output depends on."""

    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        self.history.append(x.sum())
        return x * len(self.history)


def _state(m: torch.nn.Module) -> tuple:
    return (m.step, list(m.history), m.last, m.p, m.lin.weight.detach().clone())


def _assert_unchanged(m: torch.nn.Module, before: tuple) -> None:
    step, history, last, p, weight = before
    assert (m.step, m.history, m.last, m.p) == (step, history, last, p)
    assert torch.equal(m.lin.weight, weight)


@pytest.fixture(scope="module")
def counter():
    torch.manual_seed(0)
    m = Counter().eval()
    x = torch.randn(2, 4)
    before = _state(m)
    audit = mutation.audit(m, (x,), None, "skip_all_guards")
    _assert_unchanged(m, before)  # the audit's own final check passed too (no AuditStateError)
    return m, x, audit


def _group(audit, name: str):
    return next(g for g in audit.groups if g.name == name)


def test_a_counter_the_forward_increments_is_dangerous_to_drop(counter):
    _, _, audit = counter
    assert not audit.problems
    step = _group(audit, "self.step")
    assert step.outcome == "dangerous"
    assert {g.guard_type for g in step.dropped} >= {"EQUALS_MATCH"}
    first = step.trials[0]
    # the output does not depend on it: the state does (the compiled code stores the traced 0 + 1)
    assert (first.mutation, first.outcome) == ("0 -> 1", "dangerous")
    assert first.detail == "no recompile, stale state: self.step is 1, eager wrote 2"


def test_an_empty_list_the_forward_appends_to_gets_a_verdict(counter):
    _, _, audit = counter
    history = _group(audit, "self.history")
    assert [g.guard_type for g in history.dropped] == ["SEQUENCE_LENGTH"]
    assert history.outcome == "dangerous"
    assert history.trials[0].mutation == "list grown to 1 item (a 0-d tensor)"
    assert history.trials[0].detail == "no recompile, stale state: self.history holds 1 item, eager's 2"


def test_a_constant_written_per_call_and_a_float_read_only_stay_harmless(counter):
    _, _, audit = counter
    p = _group(audit, "self.p")
    assert p.outcome == "harmless"
    applied = [t for t in p.trials if t.outcome != "not applied"]
    assert len(applied) >= 3  # 0.0, 1.0, the value's neighbours, NaN ... (-1.0 and 1e6: eager raises)
    # every call writes self.step, self.history and self.last: the same values compiled and eager
    assert {t.detail for t in applied} == {"no recompile, output and written state equal eager's"}


def test_a_list_the_output_depends_on_is_dangerous():
    m = Counts()
    x = torch.ones(3)
    audit = mutation.audit(m, (x,), None, "skip_all_guards")
    assert m.history == []
    history = _group(audit, "self.history")
    assert history.outcome == "dangerous"
    assert history.trials[0].detail.startswith("no recompile, stale output: ")


def test_suggest_keeps_the_counter_and_drops_the_float(counter):
    m, x, _ = counter
    before = _state(m)
    s = suggest.suggest(m, (x,), backend="eager")
    _assert_unchanged(m, before)
    decisions = {(g.name, g.guard_type): (grp.verdict(g.guard_type), (g.name, g.guard_type) in s.dropped)
                 for grp in s.audit.groups for g in grp.guards}
    assert decisions[("self.step", "EQUALS_MATCH")] == ("dangerous", False)
    assert decisions[("self.history", "SEQUENCE_LENGTH")] == ("dangerous", False)
    assert decisions[("self.p", "CONSTANT_MATCH")] == ("harmless", True)
    # under the suggested policy the counter counts, as in eager
    import guardpolicy as gp

    torch.compiler.reset()
    compiled = gp.compile(m, gp.load(s.text), backend="eager")
    with torch.no_grad():
        for _ in range(4):
            compiled(x)
    assert m.step == 4 and len(m.history) == 4
    torch.compiler.reset()


STORM = '''
import torch


class Storm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.mode = "fast"

    def forward(self, x, options):
        if options["run_id"] is None:  # dead: every call passes an id
            raise ValueError("a run id is needed")
        y = self.lin(x) * options["strength"]
        if self.mode == "exact":
            y = y * 2
        return y


def build():
    torch.manual_seed(0)
    return Storm().eval(), (torch.randn(2, 4), {"run_id": 7, "strength": 1.0})
'''

WORKLOAD = '''
import torch


def run(compiled, model):
    x = torch.randn(2, 4)
    for i in range(3):
        compiled(x, {"run_id": 1000 + i, "strength": 1.0})  # a new id per call: a storm
    model.mode = "exact"  # a value the audit never guesses, and it changes the output
    compiled(x, {"run_id": 2000, "strength": 1.0})
'''


def test_from_run_drops_a_storming_id_proven_harmless_and_keeps_a_dangerous_run_value(tmp_path, capsys):
    (tmp_path / "storm.py").write_text(STORM)
    (tmp_path / "workload.py").write_text(WORKLOAD)
    out, report = tmp_path / "fix.gpol", tmp_path / "fix.json"
    rc = suggest_cli.main(["--model", str(tmp_path / "storm.py"), "-o", str(out), "--backend", "eager",
                           "--bench-backends", "", "--from-run", str(tmp_path / "workload.py"),
                           "--json", str(report), "-q"])
    assert rc == 0, capsys.readouterr().err
    data = json.loads(report.read_text())
    dropped = {(d["name"], d["guard_type"]) for d in data["dropped"]}
    assert data["dropped_from_run"] == [{"name": "options['run_id']", "guard_type": "CONSTANT_MATCH"}]
    assert ("options['run_id']", "CONSTANT_MATCH") in dropped
    assert ("self.mode", "CONSTANT_MATCH") not in dropped
    trials = {(grp["state"], t["mutation"]): t["outcome"] for grp in data["audit"]["groups"] for t in grp["trials"]}
    assert trials[("self.mode", "'fast' -> 'exact' (seen in the run)")] == "dangerous"
    assert trials[("options['run_id']", "7 -> 2000 (seen in the run)")] == "harmless"
    text = out.read_text()
    assert 'drop when guard_type == CONSTANT_MATCH and guard_source == LOCAL and path in {"input:options[\'run_id\']"}' \
        in text
    assert "dropped though they failed in your run (1 guard;" in capsys.readouterr().out


def test_audit_with_two_policy_options_audits_both(tmp_path, capsys):
    path = tmp_path / "counts.py"
    path.write_text("import torch\n"
                    "class M(torch.nn.Module):\n"
                    "    def __init__(self):\n"
                    "        super().__init__()\n"
                    "        self.step = 0\n"
                    "    def forward(self, x):\n"
                    "        self.step += 1\n"
                    "        return x + 1\n"
                    "def build():\n"
                    "    return M(), (torch.ones(2),)\n")
    out = tmp_path / "a.json"
    rc = audit_cli.main(["--model", str(path), "--policy", "skip_all_guards", "--policy",
                         "skip_guard_on_all_nn_modules", "--json", str(out), "-q"])
    assert rc == 0, capsys.readouterr().err
    audits = json.loads(out.read_text())["models"]["counts.py"]
    assert [a["policy"] for a in audits] == ["skip_all_guards", "skip_guard_on_all_nn_modules"]
    for a in audits:
        [step] = [g for g in a["groups"] if g["state"] == "self.step"]
        assert step["outcome"] == "dangerous", a["policy"]
