"""The audit's bounds: memory per trial (``trial_size``), time (``--budget``), Ctrl-C, and a
next step in every refusal; on the BatchNorm + Dropout model handed over in ``eval()`` and on
a small conv net whose ``padding`` at the audit's large value would take gigabytes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import guardpolicy as gp
from guardpolicy.tools.common import model_spec as _model_spec
from guardpolicy.tools import suggest as suggest_cli
from guardpolicy.tools.mutation import calls, trial_size
from guardpolicy.tools.mutation import run as mutation

MODELS = Path(__file__).resolve().parent / "models"
BN_MODEL = str(MODELS / "batchnorm_dropout_model.py")


def _bn_built():
    return _model_spec.resolve(BN_MODEL).build()


# --------------------------------------------------------------------------- memory per trial


def test_measure_counts_the_bytes_a_call_allocates():
    x = torch.randn(64, 64)
    out, n = trial_size.measure(lambda: torch.mm(x, x) + 1)
    assert out.shape == (64, 64)
    assert n == 2 * 64 * 64 * 4  # the mm's output and the add's


def test_an_op_past_the_bound_raises_before_it_allocates():
    x = torch.randn(4, 4)
    with pytest.raises(trial_size.TrialTooLarge, match=r"over 16\.0 GiB by aten\.clone"):
        trial_size.bounded(lambda: x.expand(1 << 14, 1 << 14, 4, 4).contiguous(), 64 << 20)
    with pytest.raises(trial_size.TrialTooLarge, match="aten.zeros|aten.full|aten.empty"):
        trial_size.bounded(lambda: torch.zeros(1 << 32), 64 << 20)  # 16 GiB: never allocated
    assert trial_size.bounded(lambda: torch.zeros(16), 64 << 20).shape == (16,)


class SmallConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x).relu()


def test_a_padding_at_the_large_value_is_refused_not_run():
    torch.manual_seed(0)
    model, x = SmallConv().eval(), torch.randn(1, 3, 8, 8)
    result = mutation.audit(model, (x,), {}, "skip_all_guards", backend="eager")
    padding = next(g for g in result.groups if g.name == "self._modules['conv'].padding")
    refused = [t for t in padding.trials if t.detail.startswith("too large to try")]
    assert [t.mutation for t in refused] == ["(1, 1) -> (1048576, 1)", "(1, 1) -> (1, 1048576)"]
    assert all(t.outcome == "not applied" for t in refused)
    assert any(t.outcome == "dangerous" for t in padding.trials)  # the values that fit were tried


def test_no_trial_sets_multihead_attention_num_heads_to_zero():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 3, 8)
    _, planned = mutation.plan(lambda q: mha(q, q, q, need_weights=False)[0], (x,))
    heads = [m.what for state, _, m in planned if state.endswith(".num_heads")]
    assert heads and "2 -> 0" not in heads and "2 -> -1" not in heads and "2 -> 1" in heads


# --------------------------------------------------------------------------- time, Ctrl-C, next steps


def test_budget_ends_the_audit_and_keeps_every_state_not_finished():
    b = _bn_built()
    full = gp.suggest(b.fn, *b.args, verify=5)
    cut = gp.suggest(b.fn, *b.args, verify=5, budget=1e-6)
    audit = cut.suggestion.audit
    assert audit.planned > 0 and audit.budget_cut == audit.planned
    assert [f for f in cut.findings if f["decision"] == "drop"] == []
    assert any(f["decision"] == "drop" for f in full.findings)
    assert f"{audit.budget_cut} of {audit.planned} planned changes were not tried" in cut.text
    assert "--budget" not in full.text


def test_suggest_cli_with_a_budget_writes_a_safe_policy(tmp_path, capsys):
    out = tmp_path / "bn.gpol"
    rc = suggest_cli.main(["--model", BN_MODEL, "-o", str(out), "--backend", "eager", "--bench-backends", "",
                           "--budget", "0.000001"])
    assert rc == 0, capsys.readouterr().err
    report = capsys.readouterr().out
    assert "changes not tried, their states kept" in report and "peak memory" in report
    policy = gp.load(str(out))
    b = _bn_built()
    torch.compiler.reset()
    opt = gp.compile(b.fn, policy, backend="eager")
    with torch.no_grad():
        opt(*b.args)
        b.fn.train()
        torch.manual_seed(3)
        out_c = opt(*b.args)
        torch.manual_seed(3)
        torch.testing.assert_close(out_c, b.fn(*b.args))
    torch.compiler.reset()


def test_ctrl_c_in_suggest_on_the_batchnorm_model_leaves_no_file(monkeypatch, tmp_path, capsys):
    b = _bn_built()
    before = {k: v.clone() for k, v in b.fn.state_dict().items()}
    spec = _model_spec.resolve(BN_MODEL)
    monkeypatch.setattr(_model_spec, "resolve", lambda _: _model_spec.ModelSpec(spec.label, spec.origin, lambda: b))
    real, n = mutation._one_trial, {"calls": 0}

    def interrupted(*args):
        n["calls"] += 1
        if n["calls"] == 4:  # the training flag's first trial ran the model in train()
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(mutation, "_one_trial", interrupted)
    out = tmp_path / "bn.gpol"
    assert suggest_cli.main(["--model", BN_MODEL, "-o", str(out), "--backend", "eager"]) == 130
    assert "interrupted; the model and its inputs were restored" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    for k, v in b.fn.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not b.fn.training


@pytest.mark.parametrize("diffs, step", [
    (["model.bn.running_mean: values changed (max |diff| 0.05)"], "hand the model over in train()"),
    (["model.cache: attributes 'k' changed"], "hand over a model whose calls leave it as it was"),
])
def test_every_final_check_failure_names_the_next_step(diffs, step):
    assert step in calls.next_step(diffs)


def test_the_audit_cli_reports_its_peak_memory(capsys, tmp_path):
    from guardpolicy.tools import audit as audit_cli

    report = tmp_path / "audit.json"
    assert audit_cli.main(["--model", BN_MODEL, "--policy", "skip_all_guards", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    peak = json.loads(report.read_text())["peak_rss_mib"]
    assert 100 < peak < 4096
    assert re.search(rf"^peak memory {peak:.0f} MiB \(this process's maximum resident set\)$", out, re.M)


class KeywordModel(nn.Module):
    """A forward taking ``**kwargs`` and reading every one, as transformers' wrappers do: a
    keyword argument passed or not changes the output."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, **kwargs):
        h = self.fc(x)
        for value in kwargs.values():
            h = h * value
        return h


def test_an_inputs_keyword_keys_are_never_dropped():
    torch.manual_seed(0)
    model, x = KeywordModel().eval(), torch.randn(2, 8)
    s = gp.suggest(model, x, verify=None, scale=torch.ones(8))
    keys = [f for f in s.findings if f["guard_type"] == "DICT_KEYS_MATCH" and f["path"] == "input:kwargs"]
    assert keys and all(f["decision"] == "keep" for f in keys), keys
    assert "harmless" in {f["verdict"] for f in keys}  # the audit's changes could not show it matters
    torch.compiler.reset()
    opt = gp.compile(model, gp.load(s.text), backend="eager")
    with torch.no_grad():
        opt(x, scale=torch.ones(8))
        bias = torch.full((8,), 3.0)
        torch.testing.assert_close(opt(x, scale=torch.ones(8), bias=bias), model(x, bias=bias))
    torch.compiler.reset()


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 8, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


#: torch 2.11 to 2.14 compile no frame of a GRU model (Dynamo skips nn.GRU); 2.15 compiles it.
_GRU_SKIPPED = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15)


def test_a_model_dynamo_does_not_compile_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    model = tmp_path / "rnn.py"
    model.write_text("import torch\nfrom test_audit_bounds import Recurrent\n\n"
                     "def build():\n    torch.manual_seed(0)\n    return Recurrent().eval(), (torch.randn(2, 3, 4),)\n")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    out = tmp_path / "rnn.gpol"
    rc = suggest_cli.main(["--model", str(model), "-o", str(out), "--backend", "eager", "--bench-backends", ""])
    captured = capsys.readouterr()
    if _GRU_SKIPPED:
        err = captured.err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and "compiled no frame of the model" in err[0], captured.err
        assert "no policy is written" in err[0] and not out.exists()
    else:  # compiled: an ordinary policy, and the report says what it dropped
        assert rc == 0 and gp.load(str(out)).name == "suggested_rnn", captured.err
        assert "drops " in captured.out and " 0 of 0 guards" not in captured.out


def test_an_existing_output_is_one_line_without_the_usage(tmp_path, capsys):
    out = tmp_path / "bn.gpol"
    out.write_text("keep me\n")
    assert suggest_cli.main(["--model", BN_MODEL, "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"python -m guardpolicy suggest: error: {out} exists; give --force to replace it"]
    assert out.read_text() == "keep me\n"
