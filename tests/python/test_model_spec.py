"""``--model``: a directory is refused in one line that says what is wanted."""

from __future__ import annotations

import subprocess
import sys


def test_model_given_a_directory_says_it_wants_a_file(tmp_path):
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "capture", "--model", str(tmp_path), "-o",
                        str(tmp_path / "g.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        f"python -m guardpolicy capture: error: --model: {tmp_path} is a directory: --model wants a Python file "
        "(FILE.py[:FUNC]) or a module (package.module:FUNC)")
    assert not (tmp_path / "g.json").exists()
