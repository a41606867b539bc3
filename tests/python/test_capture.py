"""guardpolicy.tools.capture: snapshots of guard entries are faithful to the live extractor
(``policy(entries) == policy.evaluate(rows)``), survive a JSON round trip, hold no live
objects, and ``python -m guardpolicy capture`` records what a script compiles."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import warnings
import weakref

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools.capture import FIELDS, Snapshot, capture, entry_rows, recording
from conftest import MODEL_FACTORIES, MODEL_NAMES, MLP


def capture_live_and_rows(model):
    """One compile of ``model``: the live GuardFilterEntry objects (kept by a user filter)
    and the snapshot rows the recorder made of the very same entries."""
    live: list = []

    def keep_live(entries):
        live.extend(entries)
        return [True] * len(entries)

    torch._dynamo.reset()
    with warnings.catch_warnings(), recording() as rec:
        warnings.simplefilter("ignore")
        compiled = torch.compile(model.fn, backend="eager", options={"guard_filter_fn": keep_live})
        with torch.no_grad():
            compiled(*model.args)
    torch._dynamo.reset()
    snap = rec.snapshot()
    assert live and len(live) == snap.entry_count
    return live, snap


@pytest.fixture(scope="module")
def live_and_snapshots():
    return {name: capture_live_and_rows(factory()) for name, factory in MODEL_FACTORIES.items()}


def plain(value) -> bool:
    """Only JSON values: dict with str keys, list, str, int, bool."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return type(value) in (str, int, bool)


def normalized(rows):
    """Dynamo numbers its builtins-dict globals per process (`__builtins_dict___4`), and
    the number's length moves those guards in torch's guard order; two compiles of one
    model differ only there. Rows with the number blanked, as a sorted list."""
    text = [re.sub(r"__builtins_dict___\d+", "__builtins_dict___N", json.dumps(r, sort_keys=True)) for r in rows]
    return sorted(text)


# --------------------------------------------------------------------------- faithfulness


@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("name", gp.STD_POLICIES)
def test_std_policy_on_rows_matches_live_entries(name, model, live_and_snapshots, std_policies):
    live, snap = live_and_snapshots[model]
    rows = snap.rows()
    policy = std_policies[name]
    ours = policy(live)
    replay = policy.evaluate(rows)
    bad = [(i, live[i].guard_type, live[i].name) for i, (a, b) in enumerate(zip(ours, replay)) if a != b]
    assert len(ours) == len(replay) == len(live)
    assert not bad, f"{len(bad)} entries decide differently from their rows, e.g. {bad[:5]}"
    assert ours == list(getattr(torch.compiler, f"{name}_unsafe")(live))


def _literal(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_every_field_on_rows_matches_live_entries(model, live_and_snapshots):
    """A probe policy per field and value (up to 12 values each): the live extractor and
    the rows decide alike, so every field of every row holds what the extractor reads."""
    live, snap = live_and_snapshots[model]
    rows = snap.rows()
    for field in FIELDS:
        if field == "derived_guard_types":
            values = sorted({t for r in rows for t in r[field]})
            conds = [f"derived_guard_types contains {t}" for t in values]
        elif field in ("guard_type", "guard_source"):
            conds = [f"{field} == {v}" for v in sorted({r[field] for r in rows})]
        else:
            values = sorted({r[field] for r in rows}, key=repr)
            step = max(1, len(values) // 12)
            conds = [f"{field} == {_literal(v)}" if not isinstance(v, bool) else (field if v else f"not {field}")
                     for v in values[::step]]
        assert conds, field
        for cond in conds:
            p = gp.load(f"guardpolicy 1\nunsafe policy probe {{\n  drop when {cond}\n}}\n")
            assert p(live) == p.evaluate(rows), cond


def test_rows_are_entry_rows_in_schema_order(live_and_snapshots):
    live, snap = live_and_snapshots["mlp"]
    assert snap.rows() == entry_rows(live)
    assert all(tuple(r) == FIELDS for r in snap.rows())
    text = (gp.DATA_DIR / "schema" / "guard_entry.yaml").read_text()
    section = text.split("\nfields:\n", 1)[1].split("\nconfig:\n", 1)[0]
    declared = [ln.strip()[:-1] for ln in section.splitlines()
                if ln.startswith("  ") and not ln.startswith("   ") and ln.strip().endswith(":")]
    assert tuple(declared) == FIELDS


def test_buffer_parameter_and_absent_value_rows(live_and_snapshots):
    rows = live_and_snapshots["mlp"][1].rows()
    by_name = {r["name"]: r for r in rows}
    buf = by_name["self._buffers['offset']"]
    assert buf["value.is_buffer"] and buf["value.is_tensor"] and not buf["value.is_parameter"]
    assert buf["value.type"] == "torch.Tensor"
    param = by_name["self._modules['fc']._parameters['weight']"]
    assert param["value.is_parameter"] and not param["value.is_buffer"]
    assert param["value.type"] == "torch.nn.parameter.Parameter"
    ambient = [r for r in rows if not r["has_value"]]
    assert ambient
    for r in ambient:
        assert r["value.type"] == "" and not any(r[f] for f in FIELDS if f.startswith("value.is_"))


def test_capture_matches_recording(live_and_snapshots):
    """capture() (its own compile) gives the same rows as the recorded compile, up to
    Dynamo's per-process builtins-dict numbering."""
    for name, factory in MODEL_FACTORIES.items():
        model = factory()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            snap = capture(model.fn, *model.args)
        assert snap.entry_count > 0
        assert normalized(snap.rows()) == normalized(live_and_snapshots[name][1].rows()), name
        assert snap.torch == torch.__version__
        assert snap.schema_version == 1
        assert [f["frame"] for f in snap.frames] == list(range(len(snap.frames)))
    assert snap.frames[0]["code"]  # gpt2: the compiled code's co_name


def test_capture_code_name_and_kwargs():
    def f(x, *, scale):
        return x * scale

    snap = capture(f, torch.ones(3), scale=2.0)
    assert [fr["code"] for fr in snap.frames] == ["f"]
    assert snap.frames[0]["compile_id"] == "0/0"


# --------------------------------------------------------------------------- plain data


def test_json_round_trip(tmp_path, live_and_snapshots, std_policies):
    snap = live_and_snapshots["gpt2"][1]
    for fname in ("snap.json", "snap.json.gz"):
        path = tmp_path / fname
        snap.to_json(path)
        back = Snapshot.from_json(path)
        assert back == snap
        assert back.rows() == snap.rows()
        for policy in std_policies.values():
            assert policy.evaluate(back.rows()) == policy.evaluate(snap.rows())
    raw = json.loads((tmp_path / "snap.json").read_text())
    assert set(raw) == {"torch", "schema_version", "frames"}


def test_snapshot_holds_no_live_objects(live_and_snapshots):
    for _, snap in live_and_snapshots.values():
        assert plain(snap.to_dict())
        json.dumps(snap.to_dict())


def test_model_dies_after_capture():
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(4, 8)
    ref = weakref.ref(model)
    snap = capture(model, x)
    assert snap.entry_count > 0
    del model
    torch._dynamo.reset()
    gc.collect()
    assert ref() is None, "the snapshot (or the capture) keeps the model alive"
    assert plain(snap.to_dict())


def test_recording_chains_user_filter_and_restores_compile():
    original = torch.compile
    dropped_all = gp.load_std("skip_all_guards")
    calls = []

    def user_filter(entries):
        calls.append(len(entries))
        return dropped_all(entries)

    def f(x):
        return x + 1

    with recording() as rec:
        assert torch.compile is not original
        opts = {"guard_filter_fn": user_filter}
        compiled = torch.compile(f, backend="eager", options=opts)
        assert opts == {"guard_filter_fn": user_filter}  # the caller's dict is not touched
        compiled(torch.ones(3))
        compiled(torch.ones(5, 2))  # no guards kept: no recompile
    assert torch.compile is original
    assert rec.frames == len(rec.frame_rows) == 1 and calls == [rec.snapshot().entry_count]


def test_import_does_not_import_torch():
    code = "import sys, guardpolicy.tools.capture; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- command line

SCRIPT = """\
import sys
import torch

CALLS = []


def user_filter(entries):
    CALLS.append(len(entries))
    return [True] * len(entries)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).relu()


@torch.compile(backend="eager")
def double(x):
    return x * 2


def main():
    net = Net()
    torch.compile(net, backend="eager", options={"guard_filter_fn": user_filter})(torch.ones(2, 4))
    double(torch.ones(3))
    torch.compile(lambda x: x - 1, backend="eager", mode="default")(torch.ones(3))
    assert CALLS and CALLS[0] > 0, CALLS


if __name__ == "__main__":
    assert sys.argv[1:] == ["--flag"], sys.argv
    main()
"""


def _run_capture(args, cwd):
    proc = subprocess.run([sys.executable, "-m", "guardpolicy", "capture", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_cli_capture_script(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    out = tmp_path / "out.json"
    stdout = _run_capture(["prog.py", "-o", str(out), "--", "--flag"], tmp_path)
    snap = Snapshot.from_json(out)
    assert snap.entry_count > 0
    assert len(snap.frames) == 3, [f["code"] for f in snap.frames]
    assert [f["code"] for f in snap.frames] == ["forward", "double", "<lambda>"]
    assert all(f["entries"] for f in snap.frames)
    assert f"captured 3 frames, {snap.entry_count} entries" in stdout
    names = {r["name"] for r in snap.rows()}
    assert "self._modules['fc']._parameters['weight']" in names


def test_cli_capture_module_function(tmp_path):
    (tmp_path / "prog_mod.py").write_text(SCRIPT)
    out = tmp_path / "out.json"
    stdout = _run_capture(["prog_mod:main", "-o", str(out)], tmp_path)
    snap = Snapshot.from_json(out)
    assert snap.entry_count > 0 and len(snap.frames) == 3
    assert "captured 3 frames" in stdout
