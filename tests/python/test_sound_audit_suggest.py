"""Suggest on models people serve (tests/python/models, served_models.py): the policy it
writes is lint and fmt clean and passes its own tests, it keeps the boundaries' guards, and it
never serves a stale result for the changes the issue names (a change the audit could not try
is caught by ``verify`` within its window); the suggest CLI's ``verify`` default and
``--from-run`` (a workload script, a dry-run report); an adapter of another rank under
Inductor; a model that cannot be timed.

Everything runs on the eager backend but where a test names Inductor; one suggestion per model
is shared (module fixture ``suggested``); the models are described in served_models.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools.mutation import run as mutation
from guardpolicy.tools.decode import cache_keyword
from guardpolicy.tools import suggest as suggest_cli
from served_models import MODELS, NAMES, _assert_same, _built, _record


def _module(name: str):
    """The models file ``name`` as ``_model_spec`` imported it."""
    path = str(MODELS / f"{name}.py")
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path)


# --------------------------------------------------------------------------- suggest


@pytest.fixture(scope="module")
def suggested():
    """Per model: ``gp.suggest`` on the eager backend (verify every 5 calls)."""
    out = {}
    for name in NAMES:
        b = _built(name)
        out[name] = gp.suggest(b.fn, *b.args, verify=5, **b.kwargs)
    return out


def _cli(*args):
    return subprocess.run([str(Path(sys.executable).parent / "guardpolicy"), *args], capture_output=True, text=True)


@pytest.mark.parametrize("name", NAMES)
def test_suggested_policy_is_lint_and_fmt_clean_and_passes_its_tests(name, suggested, tmp_path):
    s = suggested[name]
    path = tmp_path / "p.gpol"
    path.write_text(s.text)
    lint = _cli("lint", str(path))
    assert lint.returncode == 0 and "warning" not in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    assert _cli("fmt", "--check", str(path)).returncode == 0
    test = _cli("test", str(path))
    assert test.returncode == 0 and " 0 failed" in test.stdout, test.stdout
    assert "  verify every 5 calls" in s.text
    for line in s.text.splitlines():  # a path set goes on in another rule before 240 columns; one
        # path alone may be longer (torch 2.11 with transformers 5.17 guards a global
        # `_CAN_RECORD_REGISTRY["<class '...LlamaModel'>"]`, 200 characters)
        if line.startswith("  drop when") and len(line) > 240:
            assert line.count(" path in {") == 1 and '", "' not in line.split(" path in {", 1)[1], line
    for f in s.findings:
        if f["decision"] == "drop":
            assert f["verdict"] == "harmless" and f["values_tried"] >= 1, f


def test_suggest_tries_the_boundaries_and_keeps_their_guards(suggested):
    findings = {(f["name"], f["guard_type"]): f for f in suggested["gated_model"].findings}
    n_active = findings[("self.n_active", "EQUALS_MATCH")]
    assert n_active["decision"] == "keep" and n_active["verdict"] == "dangerous"
    temperature = findings[("self.temperature", "CONSTANT_MATCH")]
    assert temperature["decision"] == "keep" and temperature["verdict"] == "dangerous"
    groups = {g.name: g for g in suggested["gated_model"].suggestion.audit.groups}
    tried = [t.mutation for t in groups["self.n_active"].trials]
    assert tried[0] == "3 -> 0"  # the boundary first; then stopped: every dropped guard dangerous


def _first_call_after(opt, model, args, change):
    change(model)
    with torch.no_grad():
        return opt(*args), model(*args)


@pytest.mark.parametrize("change", [lambda m: setattr(m, "n_active", 1), lambda m: setattr(m, "temperature", 0.0)],
                         ids=["n_active=1", "temperature=0.0"])
def test_named_changes_return_eagers_output_on_the_first_call(change, suggested):
    b = _built("gated_model")
    opt = gp.compile(b.fn, gp.load(suggested["gated_model"].text), backend="eager")
    with torch.no_grad():
        opt(*b.args)
    out, ref = _first_call_after(opt, b.fn, b.args, change)
    torch.testing.assert_close(out, ref)


def test_a_change_the_audit_could_not_try_is_caught_by_verify_within_its_window(suggested):
    s = suggested["gated_model"]
    assert s.suggestion.verify == 5
    mode = {(f["name"], f["guard_type"]): f["decision"] for f in s.findings}[("self.mode", "CONSTANT_MATCH")]
    assert mode == "drop"  # "fast" -> "fast_changed" and "" changed nothing: harmless as far as it knows
    b = _built("gated_model")
    opt = gp.compile(b.fn, gp.load(s.text), backend="eager")
    with torch.no_grad():
        opt(*b.args)
        b.fn.mode = "exact"
        outs = [(opt(*b.args), b.fn(*b.args)) for _ in range(5)]
    caught = [v.call for v in gp.stats(opt).violations]
    assert caught and caught[0] <= 6, caught
    after = outs[caught[0] - 2:]  # the caught call and the ones after it
    for out, ref in after:
        torch.testing.assert_close(out, ref)


def test_lora_adapter_of_another_rank_returns_eagers_output(suggested):
    b = _built("lora_model")
    lora = _module("lora_model")
    opt = gp.compile(b.fn, gp.load(suggested["lora_model"].text), backend="eager")
    with torch.no_grad():
        opt(*b.args)
        b.fn.adapter = lora.Adapter(16, 8)
        torch.testing.assert_close(opt(*b.args), b.fn(*b.args))
    # the audit plans the same class with other shapes (rank 4 -> 8, 4 -> 2) for the adapter
    b = _built("lora_model")
    _, planned = mutation.plan(b.fn, b.args)
    whats = {m.what for state, _, m in planned if state == "self._modules['adapter']"}
    assert {"same class Adapter, every dimension 4 -> 8", "same class Adapter, every dimension 4 -> 2"} <= whats


def test_llama_num_hidden_layers_lowered_mid_decode_returns_eagers_output(suggested):
    b = _built("llama_model")
    model = b.fn
    mod = _module("llama_model")
    cache_c, token_c = mod.prefilled(model)
    cache_e, token_e = mod.prefilled(model)
    opt = gp.compile(model, gp.load(suggested["llama_model"].text), backend="eager")
    pos = len(mod.PROMPT)
    with torch.no_grad():
        for step in range(4):
            if step == 2:
                model.config.num_hidden_layers = 1
            p = torch.tensor([pos + step])
            out = opt(input_ids=token_c, **{cache_keyword(model): cache_c}, cache_position=p).logits
            ref = model(input_ids=token_e, **{cache_keyword(model): cache_e}, cache_position=p).logits
            torch.testing.assert_close(out, ref)
            token_c = token_e = ref[:, -1:].argmax(-1)
    model.config.num_hidden_layers = 2
    # the guard on the config's num_hidden_layers: `args[0].config.num_hidden_layers` on torch
    # 2.13+ with transformers 5.25, `object.__getattribute__(self.config, 'num_hidden_layers')`
    # on 2.11 with 5.17 (the config's own __getattribute__ traced); `path` ends alike
    layers = [f for f in suggested["llama_model"].findings
              if f["path"].endswith("config.num_hidden_layers") and f["guard_type"] == "EQUALS_MATCH"]
    assert layers and {(f["verdict"], f["decision"]) for f in layers} == {("dangerous", "keep")}, layers


def test_suggest_cli_writes_verify_by_default_and_warns_without(tmp_path, capsys):
    out = tmp_path / "g.gpol"
    model = str(MODELS / "gated_model.py")
    assert suggest_cli.main(["--model", model, "-o", str(out), "--backend", "eager", "--bench-backends", "eager",
                             "--calls", "20", "-q"]) == 0
    printed = capsys.readouterr().out
    assert "  verify every 100 calls" in out.read_text()
    assert "one torch thread" in printed and "could not mutate (kept" in printed
    assert suggest_cli.main(["--model", model, "-o", str(out), "--force", "--backend", "eager", "--bench-backends",
                             "", "--no-verify", "-q"]) == 0
    text = out.read_text()
    assert "verify every" not in text and "WARNING: written with --no-verify" in text


def test_suggest_from_run_keeps_what_the_run_changed(tmp_path, capsys):
    script = tmp_path / "workload.py"
    script.write_text(
        "import torch\n"
        "def run(compiled, model):\n"
        "    x = torch.randn(2, 16)\n"
        "    compiled(x)\n"
        "    model.mode = 'exact'  # what this deployment really does\n"
        "    compiled(x)\n")
    out = tmp_path / "g.gpol"
    rc = suggest_cli.main(["--model", str(MODELS / "gated_model.py"), "-o", str(out), "--backend", "eager",
                           "--bench-backends", "", "--from-run", str(script), "--json", str(tmp_path / "g.json"),
                           "-q"])
    assert rc == 0, capsys.readouterr().err
    import json

    report = json.loads((tmp_path / "g.json").read_text())
    dropped = {(d["name"], d["guard_type"]) for d in report["dropped"]}
    assert ("self.mode", "CONSTANT_MATCH") not in dropped
    b = _built("gated_model")
    opt = gp.compile(b.fn, gp.load(out.read_text()), backend="eager")
    with torch.no_grad():
        opt(*b.args)
        b.fn.mode = "exact"
        torch.testing.assert_close(opt(*b.args), b.fn(*b.args))


def test_lora_rank_swap_under_inductor_recompiles_instead_of_raising():
    """On Inductor a kernel is specialised to the adapter's shapes: the audit's same-class
    copy of another rank makes the stale kernel raise, so the TENSOR_MATCH guards of the
    adapter's parameters are kept, and a swap with the same scaling (only the shapes differ)
    recompiles and returns eager's output."""
    b = _built("lora_model")
    lora = _module("lora_model")
    s = gp.suggest(b.fn, *b.args, backend="inductor")
    decisions = {(f["name"], f["guard_type"]): (f["verdict"], f["decision"]) for f in s.findings}
    assert decisions[("self._modules['adapter']._parameters['up']", "TENSOR_MATCH")] == ("dangerous", "keep")
    opt = gp.compile(b.fn, gp.load(s.text))  # inductor
    with torch.no_grad():
        opt(*b.args)
        new = lora.Adapter(16, 8)
        new.scaling = b.fn.adapter.scaling
        b.fn.adapter = new
        torch.testing.assert_close(opt(*b.args), b.fn(*b.args))


def test_suggest_says_when_a_model_cannot_be_timed_and_still_returns_the_policy():
    """A train-mode model draws new random numbers on every timed call, so latency's check
    that each variant returns eager's output fails: the timing says so instead of ending
    suggest, and the model is left as it was."""
    b = _built("dropout_model")
    before = _record(b.fn, b.args, b.kwargs)
    s = gp.suggest(b.fn, *b.args, bench_backends=["eager"], calls=10)
    assert s.timing["eager"][0]["variant"] == "error"
    assert "per call, eager: not timed: repeated calls raised SystemExit" in s.table()
    assert gp.lint(s.text) == []
    _assert_same(before, b.fn, b.args, b.kwargs)


def test_suggest_from_a_dry_run_report_keeps_what_the_program_changed(suggested, tmp_path, capsys):
    """``--from-run REPORT.json``: the dry-run report a program wrote under a suggested
    policy (``gp.compile(..., dry_run=PATH)``) names the dropped guard that failed; the next
    suggest keeps it."""
    import json

    b = _built("gated_model")
    opt = gp.compile(b.fn, gp.load(suggested["gated_model"].text), backend="eager", dry_run=True, verify=0)
    with torch.no_grad():
        opt(*b.args)
        b.fn.mode = "exact"
        opt(*b.args)
    b.fn.mode = "fast"
    report = tmp_path / "dry_run.json"
    report.write_text(json.dumps(gp.dry_run_report(opt).to_json()))
    assert ("self.mode", "CONSTANT_MATCH") in {(g["name"], g["guard_type"])
                                              for e in json.loads(report.read_text())["events"] for g in e["guards"]}
    out = tmp_path / "g.gpol"
    assert suggest_cli.main(["--model", str(MODELS / "gated_model.py"), "-o", str(out), "--backend", "eager",
                             "--bench-backends", "", "--from-run", str(report), "--json", str(tmp_path / "g.json"),
                             "-q"]) == 0, capsys.readouterr().err
    dropped = {(d["name"], d["guard_type"]) for d in json.loads((tmp_path / "g.json").read_text())["dropped"]}
    assert ("self.mode", "CONSTANT_MATCH") not in dropped
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert suggest_cli.main(["--model", str(MODELS / "gated_model.py"), "-o", str(tmp_path / "h.gpol"),
                             "--from-run", str(bad)]) == 2  # one line, no usage: the file's content is wrong
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--from-run: " in err and "not a dry-run report (KeyError" in err
