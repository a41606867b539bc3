"""guardpolicy/_core.pyi matches the compiled module, and the typing files ship installed.

The stub is parsed (ast), the runtime is introspected: every public name of
``guardpolicy._core`` has a stub and every stub has a runtime name; the same for the members
of ``CompiledPolicy`` (properties as properties); and every function's parameter names and
defaults equal those in pybind11's signature line (``name(a: T, b: bool = False) -> R``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import guardpolicy
from guardpolicy import _core

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_SRC = ROOT / "bindings" / "python" / "guardpolicy"
STUB = PACKAGE_SRC / "_core.pyi"


def _public(name: str) -> bool:
    return not name.startswith("_") or name == "__call__"


def _stub_tree(stub: Path = STUB) -> ast.Module:
    return ast.parse(stub.read_text(encoding="utf-8"), filename=str(stub))


def _stub_toplevel(stub: Path = STUB) -> dict[str, ast.AST]:
    out = {}
    for node in _stub_tree(stub).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def _stub_members(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def _is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def _split_top_level(text: str) -> list[str]:
    """Splits ``a: dict[str, int], b: int = 1`` at the commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


def _runtime_params(obj) -> list[tuple[str, str | None]]:
    """(name, default or None) from pybind11's signature line, ``self`` left out."""
    first = (obj.__doc__ or "").strip().splitlines()[0]
    m = re.match(r"^\w+\((.*)\) -> .*$", first)
    assert m, f"no pybind11 signature in {first!r}"
    out = []
    for param in _split_top_level(m.group(1)):
        name, _, rest = param.partition(":")
        default = rest.split("=", 1)[1].strip() if "=" in rest else None
        if name.strip() != "self":
            out.append((name.strip(), default))
    return out


def _stub_params(fn: ast.FunctionDef) -> list[tuple[str, str | None]]:
    args = fn.args.posonlyargs + fn.args.args
    defaults = [None] * (len(args) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
    assert not fn.args.kwonlyargs and not fn.args.vararg and not fn.args.kwarg, fn.name
    return [(a.arg, d) for a, d in zip(args, defaults) if a.arg != "self"]


def test_every_public_name_has_a_stub_and_vice_versa():
    runtime = {n for n in dir(_core) if not n.startswith("_")}
    stubbed = {n for n in _stub_toplevel() if not n.startswith("_")}
    assert stubbed == runtime, f"only in the stub: {stubbed - runtime}; only at run time: {runtime - stubbed}"


def test_compiled_policy_members_match():
    cls = _stub_toplevel()["CompiledPolicy"]
    assert isinstance(cls, ast.ClassDef)
    stub = _stub_members(cls)
    runtime = {n: v for n, v in vars(_core.CompiledPolicy).items() if _public(n)}
    assert {n for n in stub if _public(n)} == set(runtime)
    for name, value in runtime.items():
        assert _is_property(stub[name]) == isinstance(value, property), name


@pytest.mark.parametrize("name", ["load", "lint"])
def test_function_parameters_match(name):
    stub = _stub_toplevel()[name]
    assert isinstance(stub, ast.FunctionDef)
    assert _stub_params(stub) == _runtime_params(getattr(_core, name))


def test_the_cli_module_matches_its_stub():
    """``guardpolicy._cli`` (the command line, a module of its own: ``_core`` does not link it)."""
    from guardpolicy import _cli

    stub = _stub_toplevel(PACKAGE_SRC / "_cli.pyi")
    assert set(stub) == {n for n in dir(_cli) if not n.startswith("_")} == {"run_cli"}
    assert _stub_params(stub["run_cli"]) == _runtime_params(_cli.run_cli)


def test_method_parameters_match():
    stub = _stub_members(_stub_toplevel()["CompiledPolicy"])
    for name, value in vars(_core.CompiledPolicy).items():
        if _public(name) and not isinstance(value, property):
            assert _stub_params(stub[name]) == _runtime_params(value), name


def test_typing_files_are_in_the_source_package_and_installed():
    installed = Path(guardpolicy.__file__).resolve().parent
    for name in ("_core.pyi", "_cli.pyi", "py.typed"):
        assert (PACKAGE_SRC / name).is_file(), name
        # wheel.packages copies every file of the package directory that git does not ignore
        assert (installed / name).is_file(), f"{name} is not in the installed package {installed}"
    assert (installed / "_core.pyi").read_text(encoding="utf-8") == STUB.read_text(encoding="utf-8")
