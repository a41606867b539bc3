"""The tools run from anywhere: the data they read (the example policies the demo recommends)
is package data, found through the installed package, never relative to the working
directory. (tests/packaging/fresh_install.sh runs the demo the same way from a fresh wheel
install.)"""

import subprocess
import sys
from pathlib import Path

import guardpolicy as gp
from guardpolicy.api.data import EXAMPLES_DIR, example_policy

ROOT = Path(__file__).resolve().parents[2]


def test_every_example_policy_is_installed_with_the_package_byte_identical():
    checkout = sorted(p.name for p in (ROOT / "policies" / "examples").glob("*.gpol"))
    assert sorted(p.name for p in EXAMPLES_DIR.glob("*.gpol")) == checkout
    for name in checkout:
        assert (EXAMPLES_DIR / name).read_bytes() == (ROOT / "policies" / "examples" / name).read_bytes(), name
    assert example_policy("serving").parent == gp.DATA_DIR / "examples"
    assert str(example_policy("serving")).startswith(str(Path(gp.__file__).parent))


def test_demo_runs_from_a_directory_that_is_not_the_checkout(tmp_path):
    here, out = tmp_path / "here", tmp_path / "out"
    here.mkdir()
    proc = subprocess.run([sys.executable, "-m", "guardpolicy", "demo", "--models", "mlp", "--backends", "eager",
                           "--calls", "4", "--block", "2", "--out", str(out)],
                          cwd=here, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split(" | ")[0].strip("| ").replace("**", "").replace(" (recommended)", ""): line
            for line in proc.stdout.splitlines() if line.startswith("| ")}
    one_line, suggested = 'guardpolicy: gp.compile(model, "watch_state")', "guardpolicy: suggested + verify + direct dispatch"
    assert {"eager", "no filter", "torch's recipe (nn modules +ift +stance)", one_line, suggested} <= set(rows), proc.stdout
    assert "(recommended)" in rows[one_line]  # the README's first recommendation
    assert [name for name, line in rows.items() if "(recommended)" in line] == [one_line]
    assert "output equalled eager's before timing, within torch.testing.assert_close's" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-2].strip() == "python -m guardpolicy suggest --model my.py -o my.gpol"
    assert list(here.iterdir()) == []  # it wrote nothing where it ran
    assert sorted(p.name for p in out.iterdir()) == ["frontier_mlp.png", "suggested_mlp.gpol"]
    policy = gp.load(str(out / "suggested_mlp.gpol"))  # the suggested policy, as saved, loads
    assert "dispatch direct" in (out / "suggested_mlp.gpol").read_text()
    assert "verify every 100 calls" in (out / "suggested_mlp.gpol").read_text()
    assert policy.name == "suggested_mlp"
    assert (out / "frontier_mlp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
