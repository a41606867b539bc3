"""The guard-driven mutation audit and ``suggest`` on two user-style models that are not demo
models (tests/python/models): ``options_model.py`` (a ``transformer_options`` dict input,
float module attributes) and ``blocks_model.py`` (a ``ModuleList`` of blocks reading a global
config dict).

* ``audit --model FILE.py`` runs and names the dangerous guards with the rule that dropped them;
* every change the audit called dangerous is re-made here on a model compiled by
  ``torch.compile`` itself with torch's ``skip_all_guards_unsafe`` filter and really gives a
  stale output (or a crash) there; every change it called harmless leaves the output equal to
  eager's;
* ``suggest`` writes a policy that lints clean, passes its own ``test`` blocks, keeps every
  dangerous guard, and whose own audit finds nothing dangerous; it never overwrites a file
  without ``--force``.

Everything runs on the eager backend (compiles take about a second per model).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools.common import model_spec as _model_spec
from guardpolicy.tools import audit as audit_cli
from guardpolicy.tools.mutation import run as mutation
from guardpolicy.tools.suggest import command as suggest
from guardpolicy.tools import suggest as suggest_cli
from config_models import OwnGetattribute

MODELS = Path(__file__).resolve().parent / "models"
OPTIONS = MODELS / "options_model.py"
BLOCKS = MODELS / "blocks_model.py"
CLI = Path(sys.executable).parent / "guardpolicy"


def _built(path: Path):
    return _model_spec.resolve(str(path)).build()


def _python_m(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "guardpolicy", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


# --------------------------------------------------------------------------- suggest (shared)


@pytest.fixture(scope="module")
def suggested(tmp_path_factory):
    """Per model: ``suggest --model FILE.py`` (eager backend, a short eager timing), its
    policy file and its JSON report."""
    out = {}
    for path in (OPTIONS, BLOCKS):
        d = tmp_path_factory.mktemp(path.stem)
        gpol, report = d / "suggested.gpol", d / "suggested.json"
        rc = suggest_cli.main(["--model", str(path), "-o", str(gpol), "--backend", "eager",
                           "--bench-backends", "eager", "--calls", "20", "--json", str(report), "-q"])
        assert rc == 0
        out[path.stem] = (gpol, json.loads(report.read_text()))
    return out


def _verdicts(report: dict) -> dict[tuple[str, str], str]:
    return {(g["name"], g["guard_type"]): g["verdict"]
            for grp in report["audit"]["groups"] for g in grp["guards"]}


def _paths(report: dict) -> dict[tuple[str, str], str]:
    return {(g["name"], g["guard_type"]): g["path"] for grp in report["audit"]["groups"] for g in grp["guards"]}


# --------------------------------------------------------------------------- audit --model FILE.py


def test_audit_cli_on_a_user_file_names_the_dangerous_guards_and_their_rule(tmp_path, capsys):
    out = tmp_path / "audit.json"
    rc = audit_cli.main(["--model", str(OPTIONS), "--policy", "skip_guard_on_all_nn_modules",
                         "--json", str(out), "-q"])
    assert rc == 0
    report = json.loads(out.read_text())
    (pa,) = report["models"]["options_model.py"]
    assert pa["policy"] == "skip_guard_on_all_nn_modules" and pa["backend"] == "eager"
    assert 0 < pa["guards_dropped"] < pa["guards_offered"]
    verdicts = {(g["name"], g["guard_type"]): (g["verdict"], g["rule"], g["decision"])
                for grp in pa["groups"] for g in grp["guards"]}
    std = str(gp.std_policy_path("skip_guard_on_all_nn_modules"))
    for name in ("self.scale", "self._modules['attn'].temperature"):
        verdict, rule, decision = verdicts[(name, "CONSTANT_MATCH")]
        assert (verdict, decision) == ("dangerous", "drop"), name
        assert rule.startswith(std + ":") and int(rule.rsplit(":", 1)[1]) > 0, rule
    # the transformer_options entries are inputs: this policy keeps their guards
    assert all(n.startswith("self") for (n, _), (_, _, d) in verdicts.items() if d == "drop"), verdicts
    text = capsys.readouterr().out
    assert "dangerous" in text and "self.scale: CONSTANT_MATCH (dangerous, " in text and " values) dropped by " + std in text


def test_audit_of_skip_all_guards_finds_the_options_dict_and_global_config_stale(suggested):
    options = _verdicts(suggested["options_model"][1])
    for key in ("strength", "causal", "mode", "extra"):
        assert options[(f"transformer_options['{key}']", "CONSTANT_MATCH")] == "dangerous", key
    assert options[("transformer_options", "TYPE_MATCH")] == "harmless"
    blocks = _verdicts(suggested["blocks_model"][1])
    for key in ("residual_scale", "use_gate", "activation"):
        assert blocks[(f"G['CONFIG']['{key}']", "CONSTANT_MATCH")] == "dangerous", key
    # a block added to the ModuleList: the keys guard of its _modules dict notices it
    assert blocks[("self._modules['blocks']._modules", "DICT_KEYS_MATCH")] == "dangerous"
    assert blocks[("self._modules['blocks']._modules['1'].enabled", "CONSTANT_MATCH")] == "dangerous"
    assert blocks[("self._modules['head']._parameters['weight']", "TENSOR_MATCH")] == "harmless"
    assert blocks[("", "GLOBAL_STATE")] == "not mutated"


@pytest.mark.parametrize("path", [OPTIONS, BLOCKS], ids=lambda p: p.stem)
def test_every_dangerous_and_harmless_change_is_so_under_torchs_own_filter(path, suggested):
    """Re-made independently of the audit's compile: ``torch.compile`` with
    ``torch.compiler.skip_all_guards_unsafe``, each change applied and undone in turn."""
    report = suggested[path.stem][1]
    outcome = {(grp["state"], t["mutation"]): t["outcome"]
               for grp in report["audit"]["groups"] for t in grp["trials"]}
    built = _built(path)
    call, plans = mutation.plan(built.fn, built.args, built.kwargs)
    torch._dynamo.reset()
    compiled = torch.compile(built.fn, backend="eager",
                             options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    checked = {"dangerous": 0, "harmless": 0}
    with torch.no_grad():
        call.run(compiled)
        for state, _, m in plans:
            verdict = outcome.get((state, m.what))
            if verdict not in checked:
                continue
            undo = m.apply()
            try:
                ref = call.run(built.fn)
                try:
                    out = call.run(compiled)
                except Exception:  # noqa: BLE001 - stale code crashing is dangerous too
                    out = None
            finally:
                undo()
            same = out is not None and mutation.compare(out, ref) is None
            assert same == (verdict == "harmless"), (state, m.what, verdict)
            checked[verdict] += 1
    assert checked["dangerous"] >= 10 and checked["harmless"] >= 10, checked


# --------------------------------------------------------------------------- suggest


@pytest.mark.parametrize("model", ["options_model", "blocks_model"])
def test_suggested_policy_lints_clean_and_passes_its_own_tests(model, suggested):
    gpol, report = suggested[model]
    assert gp.lint(gpol) == []
    r = subprocess.run([str(CLI), "test", str(gpol)], capture_output=True, text=True, timeout=120)
    text = gpol.read_text()
    expects = text.count("  expect ")
    assert r.returncode == 0 and r.stdout.endswith(f"\n{expects} passed, 0 failed\n"), r.stdout + r.stderr
    # a dangerous guard is watched (checked again when its state changes), an input's tensor kept
    assert text.count("  expect drop ") >= 1 and text.count("  expect watch ") >= 1
    assert "  default watch\n" in text and "  keep when guard_source == LOCAL and guard_type in {TENSOR_MATCH" in text
    assert "  verify every 100 calls" in text and " and path " in text and " name " not in text


@pytest.mark.parametrize("model", ["options_model", "blocks_model"])
def test_suggested_policy_keeps_every_dangerous_guard_and_drops_the_harmless(model, suggested):
    gpol, report = suggested[model]
    policy = gp.load(gpol)
    verdicts = _verdicts(report)
    paths = _paths(report)
    rows = [{"name": n, "guard_type": t, "path": paths[(n, t)]} for n, t in verdicts]
    decisions = dict(zip(verdicts, policy.evaluate(rows)))
    dangerous = [k for k, v in verdicts.items() if v == "dangerous"]
    assert len(dangerous) >= 10
    assert all(decisions[k] for k in dangerous)
    assert all(decisions[k] for k, v in verdicts.items() if v in ("not mutated", "caught"))
    dropped = [k for k, keep in decisions.items() if not keep]
    assert dropped and all(verdicts[k] == "harmless" for k in dropped)
    assert sorted(dropped) == sorted((d["name"], d["guard_type"]) for d in report["dropped"])
    assert report["bench"]["eager"][1]["variant"] == "no filter"


@pytest.mark.parametrize("path", [OPTIONS, BLOCKS], ids=lambda p: p.stem)
def test_audit_of_the_suggested_policy_finds_nothing_dangerous(path, suggested):
    gpol, report = suggested[path.stem]
    built = _built(path)
    result = mutation.audit(built.fn, built.args, built.kwargs, str(gpol), label=path.stem)
    counts = result.guard_counts()
    assert result.dropped == len(report["dropped"]) > 0
    assert counts["dangerous"] == 0, result.table()
    assert counts["harmless"] + counts["caught"] + counts["not mutated"] == result.dropped
    assert counts["harmless"] > 0


def test_suggest_never_overwrites_without_force(tmp_path, suggested):
    gpol, _ = suggested["blocks_model"]
    target = tmp_path / "mine.gpol"
    target.write_text("precious\n")
    rc = suggest_cli.main(["--model", str(BLOCKS), "-o", str(target), "--backend", "eager", "--bench-backends", ""])
    assert rc == 2 and target.read_text() == "precious\n"
    rc = suggest_cli.main(["--model", str(BLOCKS), "-o", str(target), "--backend", "eager", "--bench-backends", "",
                       "--force", "-q"])
    assert rc == 0 and gp.load(target).name == "suggested_blocks_model"


# --------------------------------------------------------------------------- --model


def test_model_file_errors_say_where_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad_syntax.py"
    bad.write_text("import torch\n\ndef build(:\n    pass\n")
    r = _python_m("audit", "--model", str(bad), "-q")
    assert r.returncode == 2 and f"{bad}:3:" in r.stderr and "SyntaxError" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr

    raising = tmp_path / "raising.py"
    raising.write_text("def build():\n    x = 1\n    raise RuntimeError('no weights here')\n")
    from guardpolicy.tools import capture

    with pytest.raises(SystemExit) as exc:
        capture.main(["--model", str(raising), "-o", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{raising}:3: build() raised RuntimeError: no weights here" in err, err
    assert not (tmp_path / "s.json").exists()

    with pytest.raises(SystemExit) as exc:
        audit_cli.main(["--model", f"{OPTIONS}:make_it", "-q"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{OPTIONS}: defines no function `make_it()`" in err, err


def test_package_module_func_and_file_func_specs(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "usermodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tiny.py").write_text(
        "import torch\n\n"
        "def scaled(x, scale):\n    return x * scale\n\n"
        "def make():\n    return scaled, (torch.ones(3),), {'scale': 2.0}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    from guardpolicy.tools import capture
    from guardpolicy.tools.capture import Snapshot

    assert capture.main(["--model", "usermodels.tiny:make", "-o", "s.json"]) == 0
    snap = Snapshot.from_json(tmp_path / "s.json")
    assert {"x", "scale"} <= {row["name"] for row in snap.rows()}
    spec = _model_spec.resolve(f"{pkg / 'tiny.py'}:make")
    assert spec.label == "tiny.py:make" and spec.build().kwargs == {"scale": 2.0}
    with pytest.raises(_model_spec.ModelSpecError, match="no module named 'nosuchpkg'"):
        _model_spec.resolve("nosuchpkg.mod:make")


# --------------------------------------------------------------------------- the Python API


def test_gp_capture_audit_and_bench_return_structured_results():
    built = _built(BLOCKS)
    snap = gp.capture(built.fn, *built.args)
    assert json.loads(snap.to_json())["frames"][0]["entries"]
    assert "G['CONFIG']['residual_scale']" in snap.table()

    report = gp.audit(built.fn, built.args, policies=["skip_guard_on_globals"], label="blocks")
    (a,) = report.audits
    assert a.policy == "skip_guard_on_globals"
    dangerous = {g.name for grp, g in a.guards_with("dangerous")}
    assert "G['CONFIG']['use_gate']" in dangerous
    assert json.loads(report.to_json())["policies"][0]["dropped_guards_by_outcome"]["dangerous"] == len(
        a.guards_with("dangerous"))
    assert "G['CONFIG']['use_gate']: CONSTANT_MATCH (dangerous, " in report.table()

    bench = gp.bench(built.fn, built.args, policies=["skip_guard_on_all_nn_modules"], calls=20, block=10)
    rows = bench.tables["eager"]
    assert [r["variant"] for r in rows] == ["eager", "no filter", "skip_guard_on_all_nn_modules (gp.compile)"]
    assert all(r["median_us"] > 0 for r in rows)
    assert json.loads(bench.to_json())["backends"]["eager"][1]["vs_no_filter"] == 1.0
    assert "skip_guard_on_all_nn_modules (gp.compile)" in bench.table()


def test_import_guardpolicy_stays_cheap():
    code = ("import sys, guardpolicy; assert 'torch' not in sys.modules; "
            "assert not any(m.startswith('guardpolicy.tools') for m in sys.modules), sorted(sys.modules); "
            "assert callable(guardpolicy.audit) and callable(guardpolicy.capture) and callable(guardpolicy.bench)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ})
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- the frontier (make demo)


def test_frontier_suggested_catches_every_change_skip_all_guards_none(tmp_path):
    from guardpolicy.tools import demo, frontier

    built = _built(BLOCKS)
    f = frontier.measure("blocks", built.fn, built.args, backend="eager", calls=10, block=5)
    points = {p.name: p for p in f.points}
    assert set(points) == {"no filter", *gp.STD_POLICIES, "suggested_blocks", "suggested_blocks + verify"}
    total = points["no filter"].total
    assert total >= 10 and points["no filter"].caught == total and points["no filter"].dropped == 0
    assert points["skip_all_guards"].caught == 0 and len(points["skip_all_guards"].missed) == total
    assert points["suggested_blocks"].caught == total and points["suggested_blocks"].dropped > 0
    verified = points["suggested_blocks + verify"]
    assert verified.caught == total and verified.dropped == points["suggested_blocks"].dropped
    # skip_guard_on_globals lets the global config go stale, and nothing else; a state is
    # named by its `path` (global:NAME, named_modules() spelling), not Dynamo's source chain
    missed = points["skip_guard_on_globals"].missed
    assert missed and all(m.startswith("global:") for m in missed), missed
    assert any(m.startswith("global:CONFIG['use_gate']: ") for m in missed)
    modules = points["skip_guard_on_all_nn_modules"].missed
    assert any(m.startswith("blocks.0.fc: ") for m in modules), modules
    assert not [m for m in modules if "_modules[" in m.split(": ", 1)[0]], modules
    printed = [line for line in demo.table(f, 100.0) if "skip_guard_on_all_nn_modules misses: " in line]
    assert len(printed) == 1 and "_modules[" not in printed[0].split("misses: ")[1].split(": ")[0], printed
    assert printed[0].split("misses: ")[1].startswith(modules[0]), printed
    assert all(p.median_us > 0 for p in f.points)
    assert frontier.plot(f)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| suggested_blocks |" in "\n".join(f.table())


def test_verify_catches_what_a_filter_lets_go_stale(caplog):
    """mutation.audit(verify=1): the change skip_guard_on_globals lets go stale (the global
    config's `use_gate`) recompiles under verify, as the frontier's `+ verify` point counts it."""
    from guardpolicy.tools import frontier
    from guardpolicy.tools.mutation import run as mutation

    built = _built(BLOCKS)
    plain = mutation.audit(built.fn, built.args, None, "skip_guard_on_globals", label="blocks")
    with caplog.at_level(logging.WARNING, logger="guardpolicy"):
        checked = mutation.audit(built.fn, built.args, None, "skip_guard_on_globals", label="blocks", verify=1)
    assert not [r for r in caplog.records if r.name == "guardpolicy"]  # recorded, not logged
    stale = {c for c in frontier.dangerous_changes(plain) if c.startswith("G['CONFIG']['use_gate']")}
    assert stale
    assert not stale & frontier.dangerous_changes(checked)
    caught = {f"{g.name}: {t.mutation}" for g in checked.groups for t in g.trials if t.outcome == "caught"}
    assert stale <= caught


def test_with_verify_adds_the_line_and_renames():
    from guardpolicy.api.policy_text import PolicyText
    from guardpolicy.tools import frontier

    suggested = PolicyText("s", body=('drop when guard_type == TYPE_MATCH and name in {"G[\'CONFIG\']"}',), unsafe=True,
                           tests=('expect drop { name: "G[\'CONFIG\']", guard_type: "TYPE_MATCH" }',))
    out = frontier.with_verify(suggested, 100).render()
    policy = gp.load(out)
    assert policy.name == "s_verify" and policy.verify == (100, "recompile")
    assert "test s_verify {" in out and out.count("verify every 100 calls") == 1
    assert "test s {" in suggested.render() and "verify" not in suggested.render()  # the suggestion is unchanged


def test_gp3011_leaves_the_attribute_chains_torch_names_alone():
    """GP3011 warned of `self.config.return_dict`, a name torch 2.13 really gives GPT-2's
    config guards (docs/snapshots/gpt2.json.gz): an attribute chain through a plain object.
    It now warns only of what can only mean a submodule (a parameter at the end, an index, a
    number as a step, a prefix); suggest's own check accepts no diagnostic at all."""
    import types

    text = ('guardpolicy 1\nunsafe policy s {\n'
            '  drop when guard_type == CONSTANT_MATCH and guard_source != LOCAL and name in {"self.config.return_dict"}\n'
            '  default keep\n}\n\ntest s {\n'
            '  expect drop { name: "self.config.return_dict", guard_type: "CONSTANT_MATCH", '
            'guard_source: "LOCAL_UNSPECIALIZED_NN_MODULE" }\n}\n')
    assert gp.lint(text) == []
    assert [d.code for d in gp.lint(text.replace("self.config.return_dict", "self.norm.weight"))] == ["GP3011"]
    no_audit = types.SimpleNamespace(groups=[], guards_with=lambda verdict: [])
    assert suggest.check(text, no_audit, []) == []
    assert suggest.check(text.replace("default keep", "default drop"), no_audit, [])  # any lint counts


def test_the_demo_says_how_long_each_model_takes_before_it_starts():
    from guardpolicy.tools import demo

    line = demo.estimate(["mlp", "gpt2", "llama"], ["inductor"])
    total = sum(demo.DEMO_SECONDS.values())
    assert f"about {total / 60:.0f} minutes on a 2-core machine" in line
    assert "mlp ~20 s, gpt2 ~170 s, llama ~175 s" in line
    assert "no estimate for decoder" in demo.estimate(["mlp", "decoder"], ["inductor", "eager"])
    assert "about 40 s" in demo.estimate(["mlp"], ["inductor", "eager"])


class _Configured(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.config = OwnGetattribute()  # config_models: read past its own __getattribute__

    def forward(self, x):
        return self.lin(x) * self.config.scale


def test_the_audit_changes_an_attribute_read_past_a_classs_own_getattribute():
    """Whichever source torch reads ``config.scale`` through, the audit changes it and finds
    it dangerous (it once could not assign through ``object.__getattribute__``: "not mutated")."""
    torch.manual_seed(0)
    model = _Configured()
    (a,) = gp.audit(model, (torch.randn(2, 4),), policies=["skip_all_guards"]).audits
    scale = [(grp, g) for grp in a.groups for g in grp.guards if g.path == "config.scale"]
    assert scale, [g.name for grp in a.groups for g in grp.guards]
    assert {grp.verdict(g.guard_type) for grp, g in scale} == {"dangerous"}, [g.name for _, g in scale]
    assert model.config.scale == 2.0  # left as it was
