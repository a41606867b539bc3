"""The Python package's layers (docs/design.md, "The Python layers"), checked like the C++
stages (``check_layers``): a module imports only from its own layer or the layers below it,
no module imports itself through a circle of imports (within a layer too), no module
reads a private attribute that another module of the package defines, and no module of the
runtime's per-call rooms imports the runtime's compile-time glue or the tools.

    top          guardpolicy/__init__.py, __main__.py, cli.py, moved.py, reports.py
    tools        guardpolicy/tools/        (capture, audit, suggest, bench, demo, doctor, ...;
                                          common/, what they share, imports none of them)
    runtime      guardpolicy/runtime/      (gp.compile, verify, torch_internals, and two rooms:)
      per call   runtime/call/, runtime/watch/  (call_path, dispatch, capture, frame_locals,
                                                 stance, recovery; watching)
      glue       runtime/compiled.py, stats.py, records.py, guard_filter.py, dry_run.py
    distributed  guardpolicy/distributed/  (the agreement across ranks)
    api          guardpolicy/api/          (load, Policy, registry: no torch)
    _core        the C++ extension

The checks read the source with ``ast``; each has a self-test on a module written to break it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "bindings" / "python" / "guardpolicy"
#: Bottom to top; a module's layer is its first package below guardpolicy (or "top").
LAYERS = ("_core", "api", "distributed", "runtime", "tools", "top")


#: torch's own private attributes that some guardpolicy module also defines:
#: ``_torchdynamo_orig_backend`` (``ScopedConfigCallback`` stands in for torch's compile
#: callback, so it sets it for torch to read) and ``_stance`` (``eval_frame._stance``, which
#: the per-call hot paths read through the module ``torch_internals.eval_frame`` hands out,
#: where a function call per call would cost what the path saves).
TORCH_MIRRORED = {"_torchdynamo_orig_backend", "_stance"}

#: The runtime's rooms of what runs on the calls of a compiled object (a package each).
PER_CALL = ("guardpolicy.runtime.call", "guardpolicy.runtime.watch")
#: The runtime's compile-time glue: the entry point, the compiled object's state and what it
#: gives torch to compile with. A per-call module imports none of it, nor the tools (or the top).
COMPILE_TIME = ("guardpolicy.runtime.compiled", "guardpolicy.runtime.stats", "guardpolicy.runtime.records",
                "guardpolicy.runtime.guard_filter", "guardpolicy.runtime.dry_run")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "top"


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every guardpolicy import in ``tree``, functions included;
    ``from X import name`` counts as ``X.name`` when that is a module of the package."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "guardpolicy"]
        elif isinstance(node, ast.ImportFrom):
            target = import_base(node, module, is_package)
            if target.split(".")[0] != "guardpolicy":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((node.lineno, sub if is_module(sub) else target))
    return found


def import_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module ``from X import ...`` names in ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists() or name.endswith(("._core", "._cli"))


def upward_imports(path: Path, source: str) -> list[str]:
    module = module_name(path)
    here = LAYERS.index(layer_of(module))
    out = []
    for line, target in imported_modules(ast.parse(source), module, path.name == "__init__.py"):
        there = layer_of(target)
        if LAYERS.index(there) > here:
            out.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {layer_of(module)} imports {target} ({there})")
    return out


def in_room(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == room or module.startswith(room + ".") for room in rooms)


def per_call_imports(path: Path, source: str) -> list[str]:
    """The imports of compile-time glue (``COMPILE_TIME``), tools or the top by a module of a
    per-call room (``PER_CALL``), functions included."""
    module = module_name(path)
    if not in_room(module, PER_CALL):
        return []
    return [f"{path.relative_to(PACKAGE.parent)}:{line}: per-call {module} imports {target}"
            for line, target in imported_modules(ast.parse(source), module, path.name == "__init__.py")
            if in_room(target, COMPILE_TIME) or layer_of(target) in ("tools", "top")]


def import_graph(sources: dict[Path, str]) -> dict[str, dict[str, str]]:
    """Per module of ``sources``, the package's modules it imports, each with the ``file:line``
    of its first import: every import in the source, in functions and under ``if
    TYPE_CHECKING:`` too (a module a function or an annotation needs is a dependency all the
    same). The packages above a module, which Python imports before it, are not counted."""
    graph: dict[str, dict[str, str]] = {}
    for path, source in sources.items():
        module = module_name(path)
        edges = graph.setdefault(module, {})
        for line, target in imported_modules(ast.parse(source), module, path.name == "__init__.py"):
            if target != module:
                edges.setdefault(target, f"{path.relative_to(PACKAGE.parent)}:{line}")
    return graph


def import_circles(graph: dict[str, dict[str, str]]) -> list[str]:
    """One shortest circle per group of modules that import one another (through any chain),
    as ``a -> b (where a imports it) -> ... -> a``."""
    circles, seen = [], set()
    for start in sorted(graph):
        if start in seen:
            continue
        came_from: dict[str, str] = {}
        queue = [start]
        while queue and start not in came_from:
            module = queue.pop(0)
            for target in sorted(graph.get(module, {})):
                if target not in came_from:
                    came_from[target] = module
                    queue.append(target)
        if start not in came_from:
            continue
        path = [start]
        while len(path) == 1 or path[-1] != start:
            path.append(came_from[path[-1]])
        path.reverse()
        seen |= set(path)
        circles.append(" -> ".join([start] + [f"{b} ({graph[a][b]})" for a, b in zip(path, path[1:])]))
    return circles


def private_definitions(tree: ast.Module) -> set[str]:
    """The ``_name``s a module defines: ``self._name = ...``, ``__slots__`` entries, and the
    ``_name`` functions, classes and assignments of its top level and of its classes."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            names |= {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    scopes = [tree.body] + [c.body for c in ast.walk(tree) if isinstance(c, ast.ClassDef)]
    for stmt in (s for body in scopes for s in body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def foreign_private_reads(sources: dict[Path, str]) -> list[str]:
    """``obj._name`` (``obj`` not ``self``/``cls``) where ``_name`` is defined by another
    module of the package and not by this one: a private attribute of another module's object.
    torch's private names (``torch._guards``) are the torch boundary's concern
    (test_torch_boundary.py), as is the one torch attribute a guardpolicy callback mirrors."""
    trees = {path: ast.parse(src) for path, src in sources.items()}
    defined = {path: private_definitions(tree) for path, tree in trees.items()}
    out = []
    for path, tree in trees.items():
        others = set().union(*(names for p, names in defined.items() if p != path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in others - defined[path] - TORCH_MIRRORED and \
                    root_name(node.value) not in ("self", "cls", "torch"):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: reads {ast.unparse(node)}")
    return out


def private_imports(path: Path, source: str) -> list[str]:
    """``from X import _name`` where X is another module of the package (not ``_core`` or
    ``_cli``, the C++ extensions, whose names are their API): a private name read from
    another module."""
    module = module_name(path)
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = import_base(node, module, path.name == "__init__.py")
        private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                   and not is_module(f"{target}.{a.name}")]
        if private and target.split(".")[0] == "guardpolicy" and target != module:
            out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: imports {', '.join(private)} from {target}")
    return out


def package_sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer():
    sources = package_sources()
    assert len(sources) > 40
    top = sorted(module_name(p) for p in sources if layer_of(module_name(p)) == "top")
    assert top == ["guardpolicy", "guardpolicy.__main__", "guardpolicy.cli", "guardpolicy.moved", "guardpolicy.reports"]


def test_no_module_imports_from_a_layer_above_it():
    assert [line for path, src in package_sources().items() for line in upward_imports(path, src)] == []


def commands_imported_by_common(path: Path, source: str) -> list[str]:
    """The imports of ``guardpolicy.tools`` modules outside ``tools.common`` by a module of
    ``tools/common/``: the tools' shared pieces sit below every command."""
    module = module_name(path)
    if not module.startswith("guardpolicy.tools.common"):
        return []
    return [f"{path.relative_to(PACKAGE.parent)}:{line}: imports {target}"
            for line, target in imported_modules(ast.parse(source), module, path.name == "__init__.py")
            if target.startswith("guardpolicy.tools") and not target.startswith("guardpolicy.tools.common")]


def test_the_tools_shared_pieces_import_no_command():
    sources = package_sources()
    assert any(module_name(p).startswith("guardpolicy.tools.common.") for p in sources)
    assert [line for path, src in sources.items() for line in commands_imported_by_common(path, src)] == []


def test_a_shared_piece_importing_a_command_fails_the_check():
    shared = PACKAGE / "tools" / "common" / "compare.py"
    assert commands_imported_by_common(shared, "def f():\n    from .. import latency\n") == [
        "guardpolicy/tools/common/compare.py:2: imports guardpolicy.tools.latency"]
    assert commands_imported_by_common(shared, "from .models import build\nfrom ...api import loading\n") == []
    assert commands_imported_by_common(PACKAGE / "tools" / "demo.py", "from . import latency\n") == []


def test_an_upward_import_fails_the_check():
    api_module = PACKAGE / "api" / "policy.py"
    for source, target in (("from ..runtime import verify\n", "guardpolicy.runtime.verify"),
                           ("def f():\n    from ..tools.capture import capture\n", "guardpolicy.tools.capture"),
                           ("import guardpolicy.distributed.agreement\n", "guardpolicy.distributed.agreement")):
        found = upward_imports(api_module, source)
        assert len(found) == 1 and target in found[0], (source, found)
    assert upward_imports(PACKAGE / "runtime" / "verify.py", "from ..api.policy import RuleRef\n") == []
    assert upward_imports(PACKAGE / "runtime" / "__init__.py", "from .compiled import compile\n") == []


def test_no_per_call_module_imports_compile_time_glue_or_tools():
    assert all(is_module(name) for name in PER_CALL + COMPILE_TIME)
    assert [line for path, src in package_sources().items() for line in per_call_imports(path, src)] == []


def test_a_per_call_import_of_glue_fails_the_check():
    call_module = PACKAGE / "runtime" / "call" / "call_path.py"
    watch_module = PACKAGE / "runtime" / "watch" / "reads.py"
    for path, source, target in (
            (call_module, "from ..guard_filter import GuardFilter\n", "guardpolicy.runtime.guard_filter"),
            (call_module, "def f():\n    from ..stats import stats\n", "guardpolicy.runtime.stats"),
            (call_module, "from ... import tools\n", "guardpolicy.tools"),
            (call_module, "import guardpolicy\n", "guardpolicy"),
            (watch_module, "from .. import compiled\n", "guardpolicy.runtime.compiled"),
            (watch_module, "from ...tools.capture import capture\n", "guardpolicy.tools.capture")):
        found = per_call_imports(path, source)
        assert len(found) == 1 and found[0].endswith(f"imports {target}"), (source, found)
    assert per_call_imports(call_module, "from .. import torch_internals, verify\nfrom ..frames import CompiledFrame\n"
                                         "from ..watch import Watches\nfrom .stance import Stance\n") == []
    # compile-time glue may import the per-call rooms
    assert per_call_imports(PACKAGE / "runtime" / "compiled.py", "from .call.call_path import CallPath\n") == []


def test_no_import_circle():
    assert import_circles(import_graph(package_sources())) == []


def test_an_import_circle_fails_the_check():
    a, b, c = (PACKAGE / "runtime" / f"{name}.py" for name in "abc")
    circle = {a: "from .b import B\n",
              b: "def f():\n    from .c import C\n",
              c: "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .a import A\n"}
    assert import_circles(import_graph(circle)) == [
        "guardpolicy.runtime.a -> guardpolicy.runtime.b (guardpolicy/runtime/a.py:1)"
        " -> guardpolicy.runtime.c (guardpolicy/runtime/b.py:2) -> guardpolicy.runtime.a (guardpolicy/runtime/c.py:4)"]
    assert import_circles(import_graph({**circle, c: "from typing import TYPE_CHECKING\n"})) == []
    # a package's own __init__ importing its modules is no circle
    assert import_circles(import_graph({PACKAGE / "runtime" / "__init__.py": "from .a import A\n",
                                        a: "from .b import B\n", b: ""})) == []


def test_the_api_layer_does_not_import_torch():
    for path in (PACKAGE / "api").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            assert not any(n.split(".")[0] == "torch" for n in names), (path, node.lineno)


def test_no_module_reads_a_private_attribute_another_module_defines():
    assert foreign_private_reads(package_sources()) == []


def test_no_module_imports_a_private_name_from_another():
    assert [line for path, src in package_sources().items() for line in private_imports(path, src)] == []


def test_a_private_import_fails_the_check():
    reader = PACKAGE / "runtime" / "reader.py"
    assert private_imports(reader, "from .verify import _match, Violation\n") == [
        "guardpolicy/runtime/reader.py:1: imports _match from guardpolicy.runtime.verify"]
    assert private_imports(reader, "from .. import _core\nfrom . import torch_internals as _tp\n") == []


def test_a_foreign_private_read_fails_the_check(tmp_path):
    owner = PACKAGE / "api" / "owner.py"
    reader = PACKAGE / "runtime" / "reader.py"
    found = foreign_private_reads({
        owner: "class Owner:\n    def __init__(self):\n        self._count = 0\n",
        reader: "def read(o):\n    return o._count + o.count\n",
    })
    assert found == ["guardpolicy/runtime/reader.py:2: reads o._count"]
    assert foreign_private_reads({owner: "class Owner:\n    def __init__(self):\n        self._count = 0\n",
                                  reader: "def read(self):\n    return self._count\n"}) == []


@pytest.mark.parametrize("layer", ["api", "distributed", "runtime", "tools"])
def test_each_layer_is_a_package_with_a_docstring(layer):
    init = PACKAGE / layer / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text())), init
