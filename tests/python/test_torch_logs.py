"""guardpolicy in torch's logs: TORCH_LOGS=guardpolicy / +guardpolicy, and TORCH_TRACE's
structured trace as tlparse renders it. Each runs a real compile in a fresh process, since
torch reads both variables when it is imported."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "std" / "skip_guard_on_all_nn_modules.gpol"

SCRIPT = f"""
import torch, guardpolicy as gp
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
opt = gp.compile(model, gp.load({str(POLICY)!r}), backend="eager")
opt(torch.randn(2, 4))
frame = gp.explain(opt)[0]
print("KEPT", sum(e.keep for e in frame), "DROPPED", sum(not e.keep for e in frame))
"""


def _run(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=cwd)


def _counts(stdout: str) -> tuple[int, int]:
    m = re.search(r"KEPT (\d+) DROPPED (\d+)", stdout)
    return int(m.group(1)), int(m.group(2))


def test_torch_logs_guardpolicy_prints_one_line_per_compiled_frame(tmp_path):
    r = _run({"TORCH_LOGS": "guardpolicy"}, tmp_path)
    assert r.returncode == 0, r.stderr
    kept, dropped = _counts(r.stdout)
    lines = [ln for ln in r.stderr.splitlines() if "policy `skip_guard_on_all_nn_modules`" in ln]
    assert len(lines) == 1, r.stderr
    assert f": {kept + dropped} guards, {kept} kept, {dropped} dropped" in lines[0]
    assert re.search(r"\] \[0/0\] policy `skip_guard_on_all_nn_modules` on \w+ at \S+\.py:\d+ \[0/0\]: ", lines[0])
    assert " by skip_guard_on_all_nn_modules at " not in r.stderr  # the decisions are DEBUG


def test_plus_guardpolicy_names_each_rule_file_line_and_the_guards_code(tmp_path):
    r = _run({"TORCH_LOGS": "+guardpolicy"}, tmp_path)
    assert r.returncode == 0, r.stderr
    kept, dropped = _counts(r.stdout)
    decisions = [ln for ln in r.stderr.splitlines() if re.search(r"\] +(keep|drop) [A-Z_]+ ", ln)]
    assert len(decisions) == kept + dropped
    rule = f"by skip_guard_on_all_nn_modules at {POLICY}:6"
    drops = [ln for ln in decisions if " drop " in ln]
    assert len(drops) == dropped and all(rule in ln for ln in drops)
    (length,) = [ln for ln in decisions if " SEQUENCE_LENGTH args by default | " in ln]
    assert length.endswith("; len(L['args']) == 1")  # what the guard checks, each code part once


def test_torch_trace_holds_the_decisions_and_tlparse_lists_them(tmp_path):
    trace = tmp_path / "trace"
    r = _run({"TORCH_TRACE": str(trace)}, tmp_path)
    assert r.returncode == 0, r.stderr
    kept, dropped = _counts(r.stdout)
    out = tmp_path / "tl_out"
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")  # PIP_TOOLS installs it
    (log,) = trace.glob("*.log")
    p = subprocess.run([tlparse, str(log), "-o", str(out), "--no-browser", "--overwrite"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    found = sorted(out.rglob("guardpolicy_decisions*.json"))
    assert [f.parent.name for f in found] == ["-_0_0_0"]  # under the frame's compile id 0/0
    payload = json.loads(found[0].read_text())
    assert payload["policy"] == "skip_guard_on_all_nn_modules"
    assert len(payload["guards"]) == kept + dropped
    assert sum(g["decision"] == "drop" for g in payload["guards"]) == dropped
    assert "guardpolicy_decisions" in (out / "index.html").read_text() + "".join(
        p.read_text() for p in out.rglob("*.html"))


def test_a_watch_recompile_reason_names_what_changed():
    """torch's recompile reason for a cache entry whose watch failed (``TORCH_LOGS=recompiles``,
    ``recompile_reason`` in its compile metrics, the recompile-limit warning) names the change:
    a hook, an installed tensor replaced, a watched guard (a class swapped) with torch's text."""
    import torch
    from torch import nn

    import guardpolicy as gp
    from guardpolicy.runtime import torch_internals

    torch._dynamo.reset()
    torch_internals.clear_compilation_metrics()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)).eval()
    compiled = gp.compile(model, "watch_state", backend="eager")
    x = torch.randn(2, 4)

    class Linear(nn.Linear):
        pass

    changes = [lambda: model[2].register_forward_hook(lambda m, a, out: out * 2),
               lambda: setattr(model[0], "bias", nn.Parameter(torch.randn(4))),
               lambda: setattr(model[2], "__class__", Linear)]
    with torch.no_grad():
        for change in [lambda: None, *changes]:
            change()
            for _ in range(3):
                torch.testing.assert_close(compiled(x), model(x))
    reasons = [m.recompile_reason for m in torch_internals.compilation_metrics()][1:]
    assert len(reasons) == 3
    assert re.fullmatch(r"0/0: guardpolicy watch: \d+ watched guards, \d+ dicts: a hook changed \(_forward_hooks of 2\)",
                        reasons[0])
    assert reasons[1].endswith(": an installed tensor was replaced") and reasons[1].startswith("0/1: ")
    assert ": a watched guard failed: ___check_type_id(fn._modules['2']" in reasons[2]
    # the newest entry's last recheck passed (the calls after its compile): its text names nothing
    # more; the older entries' last rechecks failed, and their texts say why
    *older, newest = gp.stats(compiled).watches.frames
    assert newest.reason == [newest.reason_text] and newest.reason_text.startswith("guardpolicy watch: ")
    assert all(f.reason[0].startswith(f.reason_text + ": ") for f in older)
    model[2].__class__ = nn.Linear  # back: the entry that failed on the class passes again
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert older[2].reason == [older[2].reason_text]  # its text no longer names the class
