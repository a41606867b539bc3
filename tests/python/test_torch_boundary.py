"""The torch boundary: torch's private names appear in ``guardpolicy/runtime/torch_internals/`` only.

Every other module of the package and every script under bench/ reaches torch's private API
(``torch._dynamo``, ``torch._C``, ``torch._guards``, ``torch._inductor``, ``torch._logging``,
any dotted ``torch`` name with a ``_private`` part) through that one package (a module per
torch subsystem, every name handed out by its ``__init__.py``), so a new torch release is a
change there only. Read with ``ast``: names in docstrings and comments are prose, not uses;
a name in another string (a message, a logger's name) is a use: it changes with torch too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import guardpolicy

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bindings" / "python" / "guardpolicy"
BOUNDARY = PACKAGE / "runtime" / "torch_internals"  # every file in this folder


def _private(dotted: str) -> bool:
    """Whether a dotted name under ``torch`` has a private part (``torch._dynamo.config``,
    ``torch.utils._pytree``); dunders (``torch.__version__``) are public."""
    parts = dotted.split(".")
    return parts[0] == "torch" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


_DOTTED_IN_TEXT = re.compile(r"\btorch(?:\.\w+)+")


def _docstrings(tree: ast.AST) -> set[int]:
    """The ``id`` of each docstring's constant (a module's, class's or function's)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def private_torch_names(source: str) -> list[str]:
    """``"line: name"`` for each private torch name the code imports or reads, or writes in a
    string that is not a docstring."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child.parent = parent  # type: ignore[attr-defined]
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None), ast.Attribute):
            names = [n for n in [_dotted(node)] if n]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names = _DOTTED_IN_TEXT.findall(node.value)
        found += [f"{node.lineno}: {n}" for n in names if _private(n)]
    return sorted(set(found), key=lambda s: (int(s.split(":")[0]), s))


def _files() -> list[Path]:
    return sorted(p for p in [*PACKAGE.rglob("*.py"), *(ROOT / "bench").glob("*.py")] if BOUNDARY not in p.parents)


def test_only_the_boundary_package_names_torch_private_api():
    offenders = {str(p.relative_to(ROOT)): names for p in _files()
                 if (names := private_torch_names(p.read_text(encoding="utf-8")))}
    assert offenders == {}


def test_the_check_finds_a_private_name_in_each_spelling():
    code = ("import torch._dynamo\n"
            "from torch._guards import CompileContext\n"
            "from torch.utils import _pytree\n"
            "torch._dynamo.config.patch(x=1)\n"
            "print(torch.__version__, torch.compiler.reset)\n"
            "def f():\n"
            "    \"\"\"Calls torch._dynamo.reset().\"\"\"\n"
            "    log.warning(f\"{x}: torch._dynamo hit config.recompile_limit\")\n")
    assert private_torch_names(code) == [
        "1: torch._dynamo", "2: torch._guards", "2: torch._guards.CompileContext",
        "3: torch.utils._pytree", "4: torch._dynamo.config.patch", "8: torch._dynamo"]


def test_the_boundary_package_is_the_packages_and_says_its_releases():
    from guardpolicy.runtime import torch_internals

    here = Path(guardpolicy.__file__).resolve().parent
    assert Path(torch_internals.__file__).resolve() == here / "runtime" / "torch_internals" / "__init__.py"
    assert "Checked on torch 2.11.0, 2.12.1, 2.13.0, 2.14.1 and 2.15.0" in " ".join(torch_internals.__doc__.split())


def _submodule_uses(source: str, submodules: set[str]) -> list[str]:
    """``"line: what"`` for each import or read of a boundary submodule (``torch_internals.guards``)
    in ``source``: from outside, the boundary is its package's names only."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            last = node.module.split(".")
            if "torch_internals" in last and last[-1] != "torch_internals":
                found.append(f"{node.lineno}: from {node.module}")
            elif last[-1] == "torch_internals":
                found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name in submodules]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == "torch_internals" and node.attr in submodules:
            found.append(f"{node.lineno}: torch_internals.{node.attr}")
    return found


def test_outside_the_boundary_only_the_packages_names_are_used():
    submodules = {p.stem for p in BOUNDARY.glob("*.py") if p.stem != "__init__"}
    assert submodules >= {"guards", "config", "sources"}
    offenders = {str(p.relative_to(ROOT)): uses for p in _files()
                 if (uses := _submodule_uses(p.read_text(encoding="utf-8"), submodules))}
    assert offenders == {}
    assert _submodule_uses("from ..runtime.torch_internals.guards import invalidate\n"
                           "from .torch_internals import config\ntorch_internals.sources.x\n",
                           submodules) == ["1: from runtime.torch_internals.guards", "2: import config",
                                           "3: torch_internals.sources"]
