"""A missing optional dependency names the extra that brings it (``guardpolicy[tools]``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from guardpolicy.tools.common import extras


def test_a_missing_top_level_package_names_the_extra():
    with pytest.raises(extras.MissingExtraError) as info:
        extras.require("matplotlib_not_installed_here", "the charts")
    assert str(info.value) == "the charts need matplotlib_not_installed_here: pip install 'guardpolicy[tools]'"
    assert isinstance(info.value, ModuleNotFoundError)


def test_the_demo_models_without_transformers_say_which_extra(tmp_path):
    """A process where `import transformers` fails as on a machine without it."""
    (tmp_path / "transformers.py").write_text("raise ModuleNotFoundError(\"No module named 'transformers'\", name='transformers')\n")
    code = "from guardpolicy.tools import _models\n_models.build('gpt2')\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "guardpolicy.tools.common.extras.MissingExtraError: the demo models need transformers: "
        "pip install 'guardpolicy[tools]'")


def test_a_tool_without_its_extra_is_one_line(tmp_path):
    (tmp_path / "transformers.py").write_text("raise ModuleNotFoundError(\"No module named 'transformers'\", name='transformers')\n")
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "capture", "--model", "gpt2", "-o", str(tmp_path / "g.json")],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert (r.returncode, r.stderr) == (
        2, "guardpolicy capture: the demo models need transformers: pip install 'guardpolicy[tools]'\n")
    assert not (tmp_path / "g.json").exists()


def test_ctrl_c_while_a_tool_starts_is_one_line(tmp_path):
    """A KeyboardInterrupt raised while the tool's modules import torch (as Ctrl-C during a
    slow `import torch` does): one line, exit 130, no traceback."""
    (tmp_path / "torch.py").write_text("raise KeyboardInterrupt\n")
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "bench", "--model", "mlp"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert (r.returncode, r.stderr) == (130, "guardpolicy bench: interrupted while starting; nothing was done\n")
