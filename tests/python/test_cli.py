"""The installed ``guardpolicy`` command (the C++ executable): ``lint`` exit codes and
diagnostics, its data, and the Python tools behind ``python -m guardpolicy``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import guardpolicy as gp

CLI = Path(sys.executable).parent / "guardpolicy"

BAD = """guardpolicy 1
unsafe policy bad {
  drop when is_globl
  default keep
}
"""


def run(*args, cwd=None):
    assert CLI.is_file(), CLI
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_lint_bad_policy_exits_1_with_located_diagnostic(tmp_path):
    path = tmp_path / "bad.gpol"
    path.write_text(BAD)
    proc = run("lint", path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    header = f"{path}:3:13: error[GP2001]: unknown field `is_globl`"
    assert header in lines, proc.stderr
    i = lines.index(header)
    assert lines[i + 1].endswith("drop when is_globl")  # the source line
    source_col = lines[i + 1].index("drop when is_globl")
    caret = lines[i + 2]
    assert set(caret[caret.index("|") + 1:].strip()) == {"^"}
    assert caret.index("^") == source_col + len("drop when ")  # under `is_globl`
    assert caret.count("^") == len("is_globl")


def test_lint_relative_path_is_reported_as_given(tmp_path):
    (tmp_path / "bad.gpol").write_text(BAD)
    proc = run("lint", "bad.gpol", cwd=tmp_path)
    assert proc.returncode == 1
    assert "bad.gpol:3:13: error[GP2001]: unknown field `is_globl`" in proc.stderr.splitlines()


def test_lint_all_std_policies_clean():
    paths = [gp.std_policy_path(name) for name in gp.STD_POLICIES]
    assert len(paths) == 6 and all(p.is_file() for p in paths)
    proc = run("lint", *paths)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "error" not in proc.stderr


def test_lint_one_bad_among_good_exits_1(tmp_path):
    path = tmp_path / "bad.gpol"
    path.write_text(BAD)
    proc = run("lint", gp.std_policy_path("skip_all_guards"), path)
    assert proc.returncode == 1
    assert "GP2001" in proc.stderr


def test_lint_missing_file_exits_2(tmp_path):
    proc = run("lint", tmp_path / "missing.gpol")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "GP0001" in proc.stderr
    assert "missing.gpol" in proc.stderr


@pytest.mark.parametrize("args", [(), ("lint",)])
def test_no_arguments_exits_2(args):
    proc = run(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip()


def test_lint_directory_exits_2(tmp_path):
    proc = run("lint", tmp_path)
    assert proc.returncode == 2
    assert "GP0001" in proc.stderr and "directory" in proc.stderr


def test_lint_warnings_only_exits_0(tmp_path):
    path = tmp_path / "warn.gpol"
    path.write_text("guardpolicy 1\nunsafe policy p {\n  drop when guard_type == _vendor_X\n}\n")
    proc = run("lint", path)
    assert proc.returncode == 0, proc.stderr
    assert f"{path}:3:27: warning[GP2012]" in proc.stderr


def test_lint_examples_clean():
    """Every example, with the example plugins two of them need (module_kinds: modinfo,
    shallow_guards: names)."""
    examples = sorted((Path(__file__).resolve().parents[2] / "policies" / "examples").glob("*.gpol"))
    assert examples
    plugins = [arg for name in gp.EXAMPLE_PLUGINS for arg in ("--plugin", gp.example_plugin_path(name))]
    # The files first: `--plugin` takes every path after it (test_plugins_cli.py).
    proc = run("lint", *examples, *plugins)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_disasm_std_policy():
    proc = run("disasm", gp.std_policy_path("keep_tensor_guards"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == gp.load_std("keep_tensor_guards").disassemble()


@pytest.mark.parametrize("command", [[str(CLI)], [sys.executable, "-m", "guardpolicy"]],
                         ids=["executable", "python-m"])
def test_help_lists_every_subcommand(command):
    from guardpolicy.cli import PYTHON_TOOLS

    proc = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert {"lint", "fmt", "test", "compile", "disasm", "check", *PYTHON_TOOLS} <= listed, proc.stdout
    assert "Python subcommands" in proc.stdout
    sub = subprocess.run([*command, "lint", "--help"], capture_output=True, text=True, timeout=120)
    assert sub.returncode == 0 and "Python subcommands" not in sub.stdout


def test_installed_command_is_the_cpp_executable_with_the_installed_data(tmp_path):
    """Not a Python console script (issue 17, item 18): an ELF executable, reading the schema
    and std policies installed beside it (<prefix>/share/guardpolicy), not a checkout's."""
    assert CLI.read_bytes()[:4] == b"\x7fELF"
    share = Path(sys.prefix) / "share" / "guardpolicy"
    for rel in ["schema/guard_entry.yaml", *(f"std/{n}.gpol" for n in gp.STD_POLICIES)]:
        assert (share / rel).read_bytes() == (gp.DATA_DIR / rel).read_bytes(), rel
    # `use` of a std policy resolves in the installed data, from any working directory.
    (tmp_path / "u.gpol").write_text("guardpolicy 1\nunsafe policy u { use skip_guard_on_globals }\n")
    env = {k: v for k, v in os.environ.items() if k != "GUARDPOLICY_DATA_DIR"}
    r = subprocess.run([str(CLI), "test", "u.gpol"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "0 passed, 0 failed\n"


@pytest.mark.parametrize("tool", ["capture", "bench", "audit", "suggest", "demo"])
def test_python_tools_are_named_by_the_executable(tool):
    proc = run(tool, "--help")
    assert proc.returncode == 2
    assert proc.stderr == f"guardpolicy: `{tool}` is a Python tool (it needs torch): run `python -m guardpolicy {tool}`\n"
    via_python = subprocess.run([sys.executable, "-m", "guardpolicy", tool, "--help"], capture_output=True,
                                text=True, timeout=120)
    assert via_python.returncode == 0, via_python.stderr
    assert via_python.stdout.startswith(f"usage: python -m guardpolicy {tool}")


def test_lint_notes_a_guard_type_of_a_newer_release_and_exits_clean_even_with_werror(tmp_path):
    """A policy lints the same on every release: CURRENT_STREAM_MATCH (torch 2.15) is a note."""
    path = tmp_path / "streams.gpol"
    path.write_text("guardpolicy 1\nunsafe policy p {\n  drop when guard_type == CURRENT_STREAM_MATCH\n}\n")
    for flags in ([], ["--werror"]):
        proc = subprocess.run([str(CLI), "lint", *flags, str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.splitlines()[0] == (
            f"{path}:3:27: note[GP2020]: torch 2.15 and later produce GuardType `CURRENT_STREAM_MATCH`")


def test_version_has_one_source():
    """`guardpolicy --version`, `python -m guardpolicy --version`, gp.__version__ and the wheel's
    metadata all read CMakeLists.txt's project() version."""
    import importlib.metadata
    import re

    cmake = (Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    version = re.search(r"project\(guardpolicy VERSION ([0-9.]+)", cmake).group(1)
    assert gp.__version__ == version == importlib.metadata.version("guardpolicy")
    for cmd in ([str(CLI)], [sys.executable, "-m", "guardpolicy"]):
        proc = subprocess.run([*cmd, "--version"], capture_output=True, text=True)
        assert (proc.returncode, proc.stdout) == (0, f"guardpolicy {version}\n")


@pytest.mark.parametrize("typo, meant", [("lnit", "lint"), ("audti", "audit"), ("doctr", "doctor"),
                                         ("sugest", "suggest")])
def test_a_mistyped_subcommand_gets_a_suggestion(typo, meant):
    proc = subprocess.run([sys.executable, "-m", "guardpolicy", typo], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == f"guardpolicy: unknown subcommand `{typo}`: did you mean `{meant}`?"
