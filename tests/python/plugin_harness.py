"""What the test_plugins_*.py files share: the paths (the example policies, the ``guardpolicy``
command, the broken test plugins), running a script in a fresh interpreter (``run_python``) or
the command line (``run_cli``), recompile checks, a spy guard_filter_fn, linting one
diagnostic, and the ``Block`` model.

Loading is process-global and a plugin name loads once per process: the example plugins
come from the session fixture ``example_plugins`` (conftest.py); the broken test plugins
(``<build>/tests/plugins/*.so``, built by ``make build``) that do load are all named
``good``, and the ``names`` plugin with another configuration is a second ``names``, so
those run in a subprocess each and report back as JSON.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import guardpolicy as gp
from conftest import compile_with

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "policies" / "examples"
MODULE_KINDS = EXAMPLES / "module_kinds.gpol"
SHALLOW_GUARDS = EXAMPLES / "shallow_guards.gpol"
KEEP_ALL = EXAMPLES / "keep_all.gpol"
CLI = Path(sys.executable).parent / "guardpolicy"
# Where `make build` puts the broken plugins (tests/plugins/CMakeLists.txt); another build dir
# can be named with $GUARDPOLICY_TEST_PLUGIN_DIR.
BAD_PLUGIN_DIR = Path(os.environ.get("GUARDPOLICY_TEST_PLUGIN_DIR", ROOT / "build" / "tests" / "plugins"))
RECOMPILE = r"(?i)recompil"


def depth(name: str) -> int:
    """names.depth, in Python: the `.` and `[` steps of a guard name."""
    return name.count(".") + name.count("[")


def bad_plugin(kind: str) -> str:
    path = BAD_PLUGIN_DIR / f"{kind}.so"
    assert path.is_file(), f"{path} is missing: the test plugins are built by `make build` (tests/plugins/CMakeLists.txt)"
    return str(path)


def run_python(script: str, *args: str) -> dict:
    """Runs ``script`` in a fresh interpreter (``sys.argv[1:]`` = args); the script prints
    one JSON object as its last stdout line, which is returned."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cli(*args, **kwargs) -> subprocess.CompletedProcess:
    assert CLI.is_file(), CLI
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120, **kwargs)


def fail_on_recompile():
    return torch.compiler.set_stance("fail_on_recompile")


def recompiles(compiled, *args) -> bool:
    """True when calling ``compiled`` needs a new compilation (nothing is compiled)."""
    try:
        with fail_on_recompile(), torch.no_grad():
            compiled(*args)
    except Exception as e:  # torch raises RuntimeError naming the recompilation
        assert re.search(RECOMPILE, str(e)), e
        return True
    return False


def decisions_by_guard(entries, decisions) -> dict[tuple[str, str], set[bool]]:
    """{(guard_type, name): the decisions its entries got} (a name can carry several)."""
    out: dict[tuple[str, str], set[bool]] = {}
    for e, keep in zip(entries, decisions):
        out.setdefault((e.guard_type, e.name), set()).add(keep)
    return out


class Spy:
    """guard_filter_fn that records the entries and the decisions ``policy`` gave them."""

    def __init__(self, policy):
        self.policy = policy
        self.calls: list[tuple[list, list[bool]]] = []

    def __call__(self, entries):
        decisions = self.policy(entries)
        self.calls.append((list(entries), decisions))
        return decisions

    @property
    def entries(self):
        return [e for entries, _ in self.calls for e in entries]

    @property
    def decisions(self):
        return [d for _, decisions in self.calls for d in decisions]


# --------------------------------------------------------------------------- models


class Block(torch.nn.Module):
    """Linear(8, 8) + Dropout + LayerNorm(8): parameters of 64 and 8 elements."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.25)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.drop(self.fc(x)))


class LoudDropout(torch.nn.Dropout):
    """A Dropout whose forward differs: only the guard on the module's type tells them apart."""

    def forward(self, x):
        return super().forward(x) * 2


class TripleLinear(torch.nn.Linear):
    def forward(self, x):
        return super().forward(x) * 3


def make_block() -> Block:
    torch.manual_seed(0)
    return Block().eval()


BLOCK_INPUT = torch.randn(2, 8, generator=torch.Generator().manual_seed(2))


def compile_and_check(model, guard_filter_fn, *args):
    """Compiles with guard_filter_fn, checks the first call equals eager, returns it."""
    compiled = compile_with(model, guard_filter_fn)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), model(*args))
    return compiled


def lint_one(source: str) -> gp.Diagnostic:
    diags = gp.lint(source)
    assert len(diags) == 1, [d.rendered for d in diags]
    return diags[0]
