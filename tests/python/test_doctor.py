"""``python -m guardpolicy doctor`` and ``gp.doctor()``: what works on the installed torch.

Each CI leg checks its own committed answer (docs/doctor/LEG.json, from which
docs/tools/gen_support.py writes docs/support.md), so the support table says what each
supported torch and Python really do.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from guardpolicy.runtime import torch_internals

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "tools"))
import gen_support  # noqa: E402

FEATURES = ["policies as guard_filter_fn", "config lines", "stance", "verify", "dry-run", "direct dispatch",
            "many ranks", "code field"]


def test_every_feature_works_on_each_supported_torch():
    report = gp.doctor()
    assert [f.name for f in report.features] == FEATURES
    assert {f.name: f.missing for f in report.features if not f.works} == {}
    assert report.torch == torch.__version__


def test_this_legs_committed_answer_is_what_doctor_says_now():
    leg = gen_support.leg_name(platform.python_version(), torch.__version__)
    committed = gen_support.DOCTOR / f"{leg}.json"
    same_torch = sorted(gen_support.DOCTOR.glob(f"py*-torch{torch.__version__.split('+')[0]}.json"))
    assert committed.exists() or same_torch, (
        f"no docs/doctor/*.json for torch {torch.__version__}: run `python -m guardpolicy doctor --json "
        f"> docs/doctor/{leg}.json` and docs/tools/gen_support.py")
    path = committed if committed.exists() else same_torch[0]
    assert json.loads(path.read_text())["features"] == gp.doctor().to_dict()["features"]


def test_support_table_is_generated_from_the_committed_answers():
    assert gen_support.main(["--check"]) == 0
    text = gen_support.OUT.read_text()
    for version in ("torch 2.11.0, Python 3.12", "torch 2.12.1, Python 3.12", "torch 2.13.0, Python 3.11",
                    "torch 2.14.1, Python 3.11", "torch 2.15.0, Python 3.12", "torch 2.15.0, Python 3.13"):
        assert version in text


def test_the_command_prints_the_table_and_json():
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "doctor"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"guardpolicy doctor: torch {torch.__version__}, Python {platform.python_version()}"
    assert "  verify " in r.stdout and r.stdout.count("works") == len(FEATURES)
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "doctor", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert json.loads(r.stdout)["features"]["code field"] == []


def test_a_torch_without_an_internal_is_named_by_doctor_and_by_compile(monkeypatch):
    monkeypatch.setattr(torch_internals.guards, "_FAIL_REASON", None)
    verify = {f.name: f for f in gp.doctor().features}["verify"]
    assert verify.missing == ("torch._dynamo.guards.get_guard_fail_reason_helper",)
    with pytest.raises(RuntimeError, match="get_guard_fail_reason_helper.*guardpolicy doctor"):
        gp.compile(torch.nn.Linear(2, 2), gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", verify=10)
    r = gp.doctor()
    assert r.table().splitlines()[4] == "  verify                       needs torch._dynamo.guards.get_guard_fail_reason_helper"


def test_a_plain_policy_needs_none_of_the_internals(monkeypatch):
    """A policy as guard_filter_fn is torch's public API: it works without the internals
    verify, dry-run and direct dispatch read."""
    for module, name in ((torch_internals.guards, "_FAIL_REASON"), (torch_internals.guards, "_DELETED"),
                         (torch_internals.call_state, "GlobalStateGuard"), (torch_internals, "GlobalStateGuard")):
        monkeypatch.setattr(module, name, None)
    model, x = torch.nn.Linear(2, 2), torch.randn(3, 2)
    opt = torch.compile(model, backend="eager", options={"guard_filter_fn": gp.load_std("skip_guard_on_all_nn_modules")})
    torch.testing.assert_close(opt(x), model(x))
