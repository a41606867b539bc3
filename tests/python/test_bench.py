"""``python -m guardpolicy bench``: one short run on the MLP (few calls), its JSON and PNG,
the cross-checks it promises, bad --model handling, and the cookbook's policy files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import guardpolicy as gp

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

EXTRA_POLICY = """guardpolicy 1

policy recursive_tags {
  doc "Keep every guard; nested modules checked through recursive dict tags."
  default keep
  config use_recursive_dict_tags_for_guards = true
}
"""


def _bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guardpolicy", "bench", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    """One bench run on the MLP: 6 timed calls per variant, one extra --policy file."""
    tmp = tmp_path_factory.mktemp("bench")
    policy = tmp / "recursive_tags.gpol"
    policy.write_text(EXTRA_POLICY)
    out_json, out_png = tmp / "bench.json", tmp / "bench.png"
    r = _bench("--model", "mlp", "--calls", "6", "--block", "3", "--warmup", "4", "--stance-after", "4",
               "--guard-iters", "1", "--policy", str(policy), "--json", str(out_json), "--plot", str(out_png))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(out_json.read_text(encoding="utf-8"))
    return r, report, out_png


def _rows(report) -> dict[str, dict]:
    return {row["name"]: row for row in report["models"]["mlp"]}


def expected_variants() -> set[str]:
    names = {"eager", "no filter", "no filter +ift", "no filter +ift (torch)", "stance after 4",
             "set_stance (torch)", "recursive_tags", "recursive_tags (torch)", "recursive_tags +ift"}
    for p in gp.STD_POLICIES:
        names |= {p, f"torch.{p}_unsafe", f"{p} +ift", f"torch.{p}_unsafe +ift"}
    return names


def test_every_variant_with_positive_latencies(mlp_run):
    r, report, _ = mlp_run
    rows = _rows(report)
    assert set(rows) == expected_variants()
    assert len(report["models"]["mlp"]) == len(rows)  # names are unique
    for name, row in rows.items():
        assert row["median_us"] > 0 and row["p90_us"] >= row["median_us"], name
        assert row["problems"] == [], (name, row["problems"])
        if row["compiled"]:
            assert row["matches_eager"] is True, name
            assert row["compile_s"] > 0, name
    assert rows["no filter"]["vs_baseline"] == pytest.approx(1.0)
    assert "== mlp" in r.stdout and "skip_all_guards" in r.stdout
    assert "bench: mlp: timing round" in r.stderr  # the progress indicator


def test_guard_counts_are_consistent(mlp_run):
    _, report, _ = mlp_run
    rows = _rows(report)
    base = rows["no filter"]
    assert base["offered"] == base["kept"] > 0 and base["tree_guards"] > 0
    for name in ("skip_all_guards", "torch.skip_all_guards_unsafe"):
        assert rows[name]["kept"] == 0
        assert rows[name]["tree_guards"] <= base["tree_guards"]
    for p in gp.STD_POLICIES:
        for suffix in ("", " +ift"):
            ours, torch_fn = rows[p + suffix], rows[f"torch.{p}_unsafe{suffix}"]
            assert (ours["frames"], ours["offered"], ours["kept"]) == \
                (torch_fn["frames"], torch_fn["offered"], torch_fn["kept"]), p + suffix
            assert ours["tree_guards"] == torch_fn["tree_guards"], p + suffix
            assert ours["kept"] <= ours["offered"] == base["offered"]
    for name in ("stance after 4", "set_stance (torch)"):
        assert rows[name]["run_tree_guards"] < rows[name]["tree_guards"] == base["tree_guards"]
    assert rows["no filter +ift"]["config"] == {"install_free_tensors": True}
    assert rows["recursive_tags (torch)"]["config"] == {"use_recursive_dict_tags_for_guards": True}
    assert rows["recursive_tags (torch)"]["via"] == "torch.compile"
    assert rows["recursive_tags +ift"]["config"] == {
        "use_recursive_dict_tags_for_guards": True, "install_free_tensors": True}


def test_guard_evaluation_time_where_torch_exposes_it(mlp_run):
    _, report, _ = mlp_run
    rows = _rows(report)
    assert rows["eager"]["guard_eval_us"] is None
    for name, row in rows.items():
        if row["compiled"]:
            # the MLP has one frame and its arguments bind by name: the warm figure always exists
            assert row["guard_check_us"] > 0, name
            if report["profile_guard_manager"]:
                assert row["guard_eval_us"] > 0, name
            else:
                assert row["guard_eval_us"] is None, name


def test_plot_is_a_png(mlp_run):
    _, _, png = mlp_run
    assert png.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("model, message", [
    ("no_such_model", "unknown model 'no_such_model'"),
    ("missing_dir/missing.py", "no such file"),
])
def test_bad_model_exits_2_with_a_message(model, message):
    r = _bench("--model", model, "--calls", "1")
    assert r.returncode == 2
    assert message in r.stderr
    assert r.stdout == ""


def test_script_without_build_exits_2(tmp_path):
    script = tmp_path / "no_build.py"
    script.write_text("x = 1\n")
    r = _bench("--model", str(script))
    assert r.returncode == 2 and "defines no function `build()" in r.stderr


def test_bad_policy_file_exits_2(tmp_path):
    bad = tmp_path / "bad.gpol"
    bad.write_text("guardpolicy 1\n\npolicy p {\n  drop when nmae == \"x\"\n}\n")
    r = _bench("--model", "mlp", "--policy", str(bad))
    assert r.returncode == 2 and "GP2001" in r.stderr


def test_demo_rejects_unknown_models():
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "demo", "--models", "mlp,nope"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown nope" in r.stderr


def _cookbook_policies() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "cookbook.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```gpol\n# file: (\S+)\n(.*?)```", text, re.S)
    return [(name, body) for name, body in blocks]


def test_cookbook_policies_load():
    blocks = _cookbook_policies()
    assert [name for name, _ in blocks] == [
        "free_tensors.gpol", "nn_module_filters.gpol", "recursive_dict_tags.gpol", "stance_after_warmup.gpol"]
    for name, body in blocks:
        policy = gp.load(body)
        assert policy.name == name.removesuffix(".gpol")
        assert [d for d in gp.lint(body) if d.severity == "error"] == []
    loaded = {name: gp.load(body) for name, body in blocks}
    assert loaded["free_tensors.gpol"].config == {"install_free_tensors": True}
    assert loaded["nn_module_filters.gpol"].config == {"install_free_tensors": True}
    assert loaded["recursive_dict_tags.gpol"].config == {"use_recursive_dict_tags_for_guards": True}
    assert loaded["stance_after_warmup.gpol"].stance == ("skip_guard_eval_unsafe", 10)


@pytest.mark.soak
def test_inductor_on_a_hf_llama_step_matches_eager_on_every_row(tmp_path):
    """Inductor differs from eager by ~1e-7 on a Llama step: within torch.testing's float32
    tolerance, so every row is ✓ and the bench exits 0; the report says the tolerance."""
    out_json = tmp_path / "llama.json"
    r = _bench("--backend", "inductor", "--model", "llama", "--calls", "3", "--block", "3", "--warmup", "4",
               "--stance-after", "4", "--guard-iters", "0", "--json", str(out_json), "-q", timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    report = json.loads(out_json.read_text(encoding="utf-8"))
    rows = report["models"]["llama"]
    compiled = [row for row in rows if row["name"] != "eager"]
    assert len(compiled) >= 29 and all(row["matches_eager"] and not row["problems"] for row in compiled)
    assert report["backend"] == "inductor" and "rtol 1.3e-6 atol 1e-5" in report["tolerance"]
    assert "✗" not in r.stdout and "rtol 1.3e-6 atol 1e-5" in r.stdout
