"""`guardpolicy check` on a captured snapshot decides like the live policy, guard by guard."""

import subprocess
import sys
from pathlib import Path

import guardpolicy as gp
from guardpolicy.tools.capture import Snapshot, capture

CLI = Path(sys.executable).parent / "guardpolicy"


def test_check_matches_live_decisions_guard_by_guard(tmp_path, mlp_model):
    snapshot = capture(mlp_model.fn, *mlp_model.args)
    path = tmp_path / "mlp.json"
    snapshot.to_json(path)
    for name in gp.STD_POLICIES:
        policy = gp.load_std(name)
        live = policy.evaluate(snapshot.rows())
        r = subprocess.run([str(CLI), "check", str(gp.std_policy_path(name)), "--guards", str(path), "--explain"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        lines = [ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("  ") and not ln.lstrip().startswith("|")]
        assert lines == ["keep" if k else "drop" for k in live], name
        kept = sum(live)
        assert f"{len(live)} guards in {len(snapshot.frames)} frames: {kept} kept, {len(live) - kept} dropped" in r.stdout


def test_check_rows_agree_with_live_entries(mlp_model):
    """The snapshot is faithful: rows decide like the live GuardFilterEntry objects."""
    model, args = mlp_model.fn, mlp_model.args
    import torch

    seen = []

    def record(entries):
        seen.extend(entries)
        return [True] * len(entries)

    torch._dynamo.reset()
    torch.compile(model, backend="eager", options={"guard_filter_fn": record})(*args)
    from guardpolicy.tools.capture import entry_rows

    rows = entry_rows(seen)
    for name in gp.STD_POLICIES:
        policy = gp.load_std(name)
        assert policy(seen) == policy.evaluate(rows), name


def test_check_reports_bad_snapshots(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([str(CLI), "check", str(gp.std_policy_path("skip_all_guards")), "--guards", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "cannot read guard snapshot" in r.stderr
    r = subprocess.run([str(CLI), "check", str(gp.std_policy_path("skip_all_guards")), "--guards",
                        str(tmp_path / "missing.json")], capture_output=True, text=True)
    assert r.returncode == 2


def test_check_refuses_a_snapshot_outside_the_schema(tmp_path, mlp_model):
    """Issue 17 item 12: a guard_source that is no GuardSource member, in a real capture."""
    snapshot = capture(mlp_model.fn, *mlp_model.args)
    frames = snapshot.to_dict()["frames"]
    frames[0]["entries"][2]["guard_source"] = "NOPE"
    bad = tmp_path / "bad.json"
    Snapshot(frames=frames, torch=snapshot.torch, schema_version=snapshot.schema_version).to_json(bad)
    r = subprocess.run([str(CLI), "check", str(gp.std_policy_path("skip_guard_on_globals")), "--guards", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "frame 0 entry 2: field `guard_source` is `NOPE`, not a GuardSource member" in r.stderr
    assert r.stdout == ""


def test_check_explain_names_rules_as_python_does(tmp_path, mlp_model):
    """Issue 17 item 17: one format, `policy at file:line`, in `check --explain` and RuleRef."""
    snapshot = capture(mlp_model.fn, *mlp_model.args)
    path = tmp_path / "mlp.json"
    snapshot.to_json(path)
    source = gp.std_policy_path("skip_guard_on_all_nn_modules")
    explained = gp.load(source).explain(snapshot.rows())
    r = subprocess.run([str(CLI), "check", str(source), "--guards", str(path), "--explain"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    guards: list[tuple[str, list[str]]] = []  # (the guard's line, its `| code` lines)
    for ln in r.stdout.splitlines():
        if ln.lstrip().startswith("| "):
            guards[-1][1].append(ln.split("| ", 1)[1])
        elif ln.startswith("  "):
            guards.append((ln, []))
    assert len(guards) == len(explained)
    assert any(e.rule for e in explained) and any(e.rule is None for e in explained)
    for (line, code), e in zip(guards, explained):
        want = str(e.rule) if e.rule else f"default at {source}:7"
        assert line.endswith(" " + want), (line, want)
        assert "\n".join(code) == e.code, line
    assert "L['self'].scale == 0.5" in [e.code for e in explained]
    assert str(next(e.rule for e in explained if e.rule)) == f"skip_guard_on_all_nn_modules at {source}:6"
