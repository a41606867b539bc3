"""``capture`` never loses a snapshot: a script that raises, exits non-zero or is interrupted
(SIGINT), or a write that fails midway (a file-size limit standing in for a full disk),
leaves an existing ``-o`` file byte-identical, and the command says so in one line with a
non-zero status (130 for Ctrl-C)."""

import signal
import subprocess
import sys
import time

import pytest

import sigint

GOOD = """
import torch
torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
"""

RAISES = """
import torch
torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
raise ValueError("the data loader broke")
"""

EXITS = """
import sys
sys.exit(3)
"""

SLEEPS = """
import sys, time, torch
torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
print("READY", flush=True)
time.sleep(120)
"""


def capture(cwd, *args, **kw):
    return sigint.popen([sys.executable, "-u", "-m", "guardpolicy", "capture", *args], cwd=cwd,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.fixture
def good_snapshot(tmp_path):
    (tmp_path / "good.py").write_text(GOOD)
    out = tmp_path / "snap.json"
    proc = capture(tmp_path, "good.py", "-o", str(out))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    return out, out.read_bytes()


@pytest.mark.parametrize("script, status, says", [
    (RAISES, 1, "raised ValueError: the data loader broke"),
    (EXITS, 3, "exited with status 3"),
], ids=["raises", "exits_3"])
def test_a_failing_script_leaves_the_snapshot_byte_identical(tmp_path, good_snapshot, script, status, says):
    out, before = good_snapshot
    (tmp_path / "bad.py").write_text(script)
    proc = capture(tmp_path, "bad.py", "-o", str(out))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == status
    assert out.read_bytes() == before
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "left as it was (nothing written)" in lines[0], stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py", "good.py", "snap.json"]  # no temporary left


def test_ctrl_c_leaves_the_snapshot_and_exits_130_with_one_line(tmp_path, good_snapshot):
    out, before = good_snapshot
    (tmp_path / "slow.py").write_text(SLEEPS)
    proc = capture(tmp_path, "slow.py", "-o", str(out))
    assert proc.stdout.readline().strip() == "READY"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert out.read_bytes() == before
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capture: interrupted while slow.py ran;"), stderr


def test_a_successful_capture_replaces_the_snapshot(tmp_path, good_snapshot):
    out, before = good_snapshot
    (tmp_path / "other.py").write_text(RAISES.replace('raise ValueError("the data loader broke")\n', ""))
    proc = capture(tmp_path, "other.py", "-o", str(out))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert out.read_bytes() != before and "captured 1 frames" in stdout


def _small_file_limit():  # a "full disk" for this process: writes past 2 kB fail (EFBIG)
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


def test_a_write_that_fails_midway_leaves_the_snapshot_and_says_so_in_one_line(tmp_path, good_snapshot):
    out, before = good_snapshot
    (tmp_path / "big.py").write_text(GOOD.replace("lambda x: x + 1", "lambda x: (x + 1).sin().cos() * 2"))
    proc = capture(tmp_path, "big.py", "-o", str(out), preexec_fn=_small_file_limit)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr
    assert out.read_bytes() == before
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"capture: cannot write {out}: ") and "left as it was" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.py", "good.py", "snap.json"]
