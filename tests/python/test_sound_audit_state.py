"""The audit on models people serve (tests/python/models, served_models.py): it never changes
what it was given (the model, its inputs, the RNG state; after a failed final check or Ctrl-C
too), it needs repeatable calls (one line where they are not; ``train()`` dropout under a fixed
seed), the CLI's exit codes, a second audit of the same Llama agreeing with the first, and
-0.0 tried where this torch's value guards notice it.

Everything runs on the eager backend; the models are described in served_models.py.
Suggest on the same models is test_sound_audit_suggest.py.
"""

from __future__ import annotations

import re

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools.common import model_spec as _model_spec
from guardpolicy.tools import audit as audit_cli
from guardpolicy.tools.mutation import run as mutation
from guardpolicy.tools import suggest as suggest_cli
from served_models import AUDITED, MODELS, _assert_same, _built, _record


@pytest.mark.parametrize("name", AUDITED)
def test_gp_audit_leaves_model_and_inputs_unchanged(name):
    b = _built(name)
    before = _record(b.fn, b.args, b.kwargs)
    training = [m.training for m in b.fn.modules()]
    report = gp.audit(b.fn, b.args, b.kwargs, policies=["skip_all_guards"])
    [a] = report.audits
    assert not a.problems
    assert a.guard_counts()["dangerous"] > 0 and a.restores > 0
    _assert_same(before, b.fn, b.args, b.kwargs)
    assert [m.training for m in b.fn.modules()] == training


def test_the_max_norm_change_renormalises_in_place_and_the_audit_undoes_it():
    b = _built("decoder_model")
    weight = b.fn.tok.weight.detach().clone()
    [a] = gp.audit(b.fn, b.args, b.kwargs, policies=["skip_all_guards"]).audits
    trials = [t for g in a.groups if g.name == "self._modules['tok'].max_norm" for t in g.trials]
    assert any(t.mutation == "None -> 1.0" and t.outcome == "dangerous" for t in trials), trials
    # eager itself renormalises the embedding in place under max_norm=1.0 ...
    probe = _built("decoder_model")
    probe.fn.tok.max_norm = 1.0
    with torch.no_grad():
        probe.fn(*probe.args)
    assert not torch.equal(probe.fn.tok.weight, weight)
    # ... and the audited model's weights are the ones it was given
    assert torch.equal(b.fn.tok.weight, weight)


@pytest.mark.parametrize("name", AUDITED)
def test_audit_cli_exits_0(name, capsys):
    rc = audit_cli.main(["--model", str(MODELS / f"{name}.py"), "--policy", "skip_all_guards", "-q"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "dangerous" in out.out and "Traceback" not in out.err


def test_a_model_whose_calls_do_not_repeat_stops_with_one_line(tmp_path, capsys):
    path = tmp_path / "unrepeatable.py"
    path.write_text(
        "import torch\n"
        "GEN = torch.Generator().manual_seed(1)  # its own generator: no seed of the audit reaches it\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + torch.randn(x.shape, generator=GEN)\n"
        "def build():\n"
        "    return M(), (torch.zeros(3),)\n")
    rc = audit_cli.main(["--model", str(path), "--policy", "skip_all_guards", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and "two eager calls of the model from the same state and seed differ" in err[0]
    assert ".eval()" in err[0] and "build()" in err[0]
    b = _model_spec.resolve(str(path)).build()
    with pytest.raises(mutation.NotRepeatableError):
        gp.audit(b.fn, b.args, policies=["skip_all_guards"])


def test_dropout_in_train_mode_is_audited_under_a_fixed_seed():
    b = _built("dropout_model")
    assert b.fn.training
    [a] = gp.audit(b.fn, b.args, policies=["skip_all_guards"]).audits
    assert not a.problems
    verdicts = {(g.name, t.mutation): t.outcome for g in a.groups for t in g.trials}
    # p 0.25 -> 0.0 changes what dropout zeroes: the stale graph keeps the old p
    assert verdicts[("self._modules['drop'].p", "0.25 -> 0.0")] == "dangerous"
    assert verdicts[("self.noise", "0.1 -> 0.0")] == "dangerous"


def test_a_failed_final_check_is_one_line_and_restores(monkeypatch):
    """A state change the snapshot does not know how to undo (simulated: restore does
    nothing for a parameter) fails the audit loudly, after restoring what it can."""
    from guardpolicy.tools.mutation import state as mutation_state

    b = _built("gated_model")
    original = mutation_state._Tensor.restore
    monkeypatch.setattr(mutation_state._Tensor, "restore", lambda self: None)
    weight = b.fn.layers[0].weight

    def damage(group, mutations, rec, session, compiled, *rest):
        with torch.no_grad():
            weight.add_(1.0)

    monkeypatch.setattr(mutation, "_audit_group", damage)
    with pytest.raises(mutation.AuditStateError) as info:
        mutation.audit(b.fn, b.args, None, "skip_all_guards")
    assert "\n" not in str(info.value) and "layers.0.weight: values changed" in str(info.value)
    assert str(info.value).endswith("or return that state from build() as an input")  # the next step
    monkeypatch.setattr(mutation_state._Tensor, "restore", original)


def _interrupt_trial(monkeypatch, n: int) -> None:
    """Ctrl-C (a KeyboardInterrupt) in the audit's ``n``-th trial."""
    calls = {"n": 0}
    real = mutation._one_trial

    def interrupted(m, rec, session, compiled):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(m, rec, session, compiled)

    monkeypatch.setattr(mutation, "_one_trial", interrupted)


def test_ctrl_c_during_the_audit_restores_the_model(monkeypatch):
    b = _built("decoder_model")
    before = _record(b.fn, b.args, b.kwargs)
    _interrupt_trial(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        gp.audit(b.fn, b.args, policies=["skip_all_guards"])
    _assert_same(before, b.fn, b.args, b.kwargs)


@pytest.mark.parametrize("tool", ["audit", "suggest"])
def test_ctrl_c_in_the_cli_is_one_line_and_the_model_is_restored(tool, monkeypatch, capsys, tmp_path):
    b = _built("gated_model")
    before = _record(b.fn, b.args, b.kwargs)
    spec = _model_spec.resolve(str(MODELS / "gated_model.py"))
    monkeypatch.setattr(_model_spec, "resolve", lambda _: _model_spec.ModelSpec(spec.label, spec.origin, lambda: b))
    _interrupt_trial(monkeypatch, 3)
    model = str(MODELS / "gated_model.py")
    if tool == "audit":
        rc = audit_cli.main(["--model", model, "--policy", "skip_all_guards"])
    else:
        rc = suggest_cli.main(["--model", model, "-o", str(tmp_path / "x.gpol"), "--backend", "eager"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130 and err == [f"python -m guardpolicy {tool}: interrupted; the model and its inputs were restored"]
    assert not (tmp_path / "x.gpol").exists()
    _assert_same(before, b.fn, b.args, b.kwargs)


@pytest.mark.soak
def test_a_second_audit_of_the_same_llama_agrees_with_the_first():
    """transformers installs hooks and caches state on the objects it runs; an audit that left
    them behind made the next audit of the same object disagree with the first."""
    b = _built("llama_model")

    def verdicts():
        [a] = gp.audit(b.fn, b.args, b.kwargs, policies=["skip_all_guards"]).audits
        # torch numbers some globals per compile (G['__builtins_dict___16']): compared unnumbered
        return {(re.sub(r"___\d+'", "___N'", g.name), g.guard_type, re.sub(r"___\d+", "___N", g.path)):
                grp.verdict(g.guard_type)
                for grp in a.groups for g in grp.guards}

    first, second = verdicts(), verdicts()
    assert first == second
    # the config's num_hidden_layers, under its name on this torch and transformers (see above)
    layers = [v for (_, t, path), v in first.items() if path.endswith("config.num_hidden_layers") and t == "EQUALS_MATCH"]
    assert layers and set(layers) == {"dangerous"}


def test_negative_zero_is_tried_where_this_torchs_value_guards_notice_it():
    """torch 2.15 compares value guards bit for bit (0.0 -> -0.0 recompiles), 2.11 to 2.14
    with == (it does not): the audit tries -0.0 for a 0.0 exactly where the guard notices."""
    import math

    from guardpolicy.runtime import torch_internals
    from guardpolicy.tools.mutation import values as mutation_values

    def has_negative_zero(values):
        return any(v == 0.0 and math.copysign(1, v) < 0 for v in values)

    bits = torch_internals.value_guards_compare_bits()
    assert bits == (tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 15))
    assert has_negative_zero(mutation_values.float_values(0.0)) == bits
    assert has_negative_zero(mutation_values.float_values(0.5))  # a non-zero value: -0.0 is a change anyway
