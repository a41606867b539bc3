"""The schema fields `path` and `module_path` (docs/schema.md, "Real names") on every guard
of both demo models: each non-empty `path` resolves, on the model (or the compiled frame's
inputs, closure cells and globals), to the very object torch guarded; parameters, buffers
and submodules are named as named_parameters() / named_buffers() / named_modules() name
them; `module_path` is the named_modules() name of the nearest module. The binding's
fields (a policy reading live entries) agree with the capture rows."""

from __future__ import annotations

import ast
import functools
import re
import sys
import types
import warnings

import pytest
import torch

import guardpolicy as gp
from guardpolicy import _core
from guardpolicy.tools.common import models as _models
from guardpolicy.tools.capture import entry_row

_TOKEN = re.compile(r"""\.?(?P<attr>[^.\[\]]+)|\[(?P<key>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\]]*)\]""")


def resolve(path: str, model, scope: dict):
    """The object `path` names: under `model` (no prefix), or under the compiled frame's
    locals (`input:`, `closure:`) or globals (`global:`)."""
    obj, rest = model, path
    for prefix, table in (("input:", scope["L"]), ("closure:", scope["L"]), ("global:", scope["G"])):
        if path.startswith(prefix):
            m = re.match(r"[^.\[]+", path[len(prefix):])
            obj, rest = table[m.group(0)], path[len(prefix) + m.end():]
            break
    pos = 0
    while pos < len(rest):
        m = _TOKEN.match(rest, pos)
        assert m, f"cannot read {path!r} at {rest[pos:]!r}"
        obj = getattr(obj, m.group("attr")) if m.group("attr") is not None else obj[ast.literal_eval(m.group("key"))]
        pos = m.end()
    return obj


def same_object(got, value) -> bool:
    """``got`` is the guarded ``value``. A bound method is a new object on every attribute
    read (torch 2.11 guards ``ModuleList.__iter__`` with HASATTR and offers the bound method it
    read): the same method is the same function bound to the same object."""
    if isinstance(value, types.MethodType):
        return (isinstance(got, types.MethodType) and got.__func__ is value.__func__
                and got.__self__ is value.__self__)
    return got is value


def _builder_scope() -> dict:
    """{"L": locals, "G": globals} of the frame being compiled: copies of the scope of the
    GuardBuilder torch built the filter's entries with (a local of
    CheckFunctionManager.__init__; torch prunes the globals it installed after compiling)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "__init__" and "builder" in frame.f_locals:
            scope = frame.f_locals["builder"].scope
            return {"L": dict(scope["L"]), "G": dict(scope["G"])}
        frame = frame.f_back
    raise AssertionError("no GuardBuilder above the guard_filter_fn call")


@functools.cache
def _capture(name: str):
    """(name, model, [(entry, row, scope)]) for one demo model, every compiled frame."""
    torch._dynamo.reset()
    model, args = _models.build(name)
    seen = []

    def keep_all(entries):
        scope = _builder_scope()
        seen.extend((e, entry_row(e), scope) for e in entries)
        return [True] * len(entries)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(model, backend="eager", options={"guard_filter_fn": keep_all})(*args)
    torch._dynamo.reset()
    return name, model, seen


@pytest.fixture(params=_models.DEMO_MODELS)
def demo(request):
    return _capture(request.param)


def test_every_path_resolves_to_the_guarded_object(demo):
    name, model, seen = demo
    resolved = 0
    for entry, row, scope in seen:
        path = row["path"]
        if not entry.has_value or (path == "" and entry.name != "self"):
            continue
        if path == "":  # the frame's `self`: the model
            assert scope["L"]["self"] is model
        got = resolve(path, model, scope)
        assert same_object(got, entry.value), f"{name}: {entry.name} -> {path!r} is not the guarded value"
        resolved += 1
    with_value = sum(1 for e, _, _ in seen if e.has_value)
    # Every valued guard of the MLP has a path; GPT-2 also guards type(...).__dict__ and
    # __mro__ entries, which have none.
    if name == "mlp":
        assert resolved == with_value
    else:
        assert resolved > 0.8 * with_value
        unnamed = [e.name for e, r, _ in seen if e.has_value and r["path"] == "" and e.name != "self"]
        assert unnamed and all(n.startswith(("dict(", "type(", "dict.__getitem__(", "list(")) for n in unnamed), unnamed[:5]


def test_parameters_buffers_and_modules_read_as_named_star(demo):
    name, model, seen = demo
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    modules = dict(model.named_modules(remove_duplicate=False))
    counts = {"parameter": 0, "module": 0}
    for entry, row, _ in seen:
        if not entry.has_value or not row["path"] and entry.name != "self":
            continue
        path, value = row["path"], entry.value
        if path.startswith(("input:", "closure:", "global:")):
            continue
        if isinstance(value, torch.nn.Parameter):
            assert params[path] is value, path
            counts["parameter"] += 1
        elif isinstance(value, torch.Tensor) and path in buffers:
            assert buffers[path] is value
        elif isinstance(value, torch.nn.Module):
            assert modules[path] is value, path
            assert row["module_path"] == path
            counts["module"] += 1
    assert counts["parameter"] == len(params), f"{name}: every parameter is guarded once by TENSOR_MATCH"
    assert counts["module"] > 0


def test_module_path_is_the_nearest_enclosing_named_module(demo):
    name, model, seen = demo
    modules = dict(model.named_modules(remove_duplicate=False))
    for _entry, row, _ in seen:
        path, module_path = row["path"], row["module_path"]
        if not path or path.startswith(("input:", "closure:", "global:")):
            continue
        assert module_path in modules, (path, module_path)
        # the longest named_modules() name that is a prefix of the path
        prefixes = [m for m in modules if m == path or path.startswith(m + ".") or path.startswith(m + "[") or m == ""]
        assert module_path == max(prefixes, key=len), (path, module_path)


def test_paths_of_the_mlp():
    """A few paths spelled out, as torch 2.13 names the same guards."""
    _, _, seen = _capture("mlp")
    by_name = {e.name: r for e, r, _ in seen}
    assert by_name["self._modules['blocks']._modules['0']._modules['0']._parameters['weight']"]["path"] == "blocks.0.0.weight"
    assert by_name["self._modules['blocks']._modules['0']._modules['0']._parameters['weight']"]["module_path"] == "blocks.0.0"
    assert by_name["self._modules['head']"]["path"] == "head"
    assert by_name["self._modules['blocks']._modules"]["path"] == "blocks._modules"
    assert by_name["self._modules['blocks']._modules"]["module_path"] == "blocks"
    assert by_name["x"]["path"] == "input:x" and by_name["x"]["module_path"] == ""
    # Dynamo numbers the builtins dict per process (`__builtins_dict___N`): N depends on what
    # compiled before, so the entry is found by its shape.
    builtins = [n for n in by_name if re.fullmatch(r"G\['__builtins_dict___\d+'\]\['iter'\]", n)]
    assert len(builtins) == 1, sorted(by_name)
    number = re.search(r"\d+", builtins[0]).group()
    assert by_name[builtins[0]]["path"] == f"global:__builtins_dict___{number}['iter']"
    assert by_name[""]["path"] == "" and by_name[""]["module_path"] == ""


def test_the_binding_reads_what_the_rows_say(demo):
    """A policy over the live entries (the C++ extractor) decides as over the rows."""
    name, model, seen = demo
    entries = [e for e, _, _ in seen]
    for field in ("path", "module_path"):
        values = sorted({r[field] for _, r, _ in seen})
        assert len(values) > 3
        for v in values[:: max(1, len(values) // 25)] + [""]:
            lit = '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
            policy = gp.load(f"guardpolicy 1\nunsafe policy probe {{\n  drop when {field} == {lit}\n}}\n")
            assert policy.fields == [field]
            assert policy(entries) == [r[field] != v for _, r, _ in seen], (field, v)


def test_source_paths_of_a_non_source_is_empty():
    assert _core.source_paths(object()) == ("", "")
    assert _core.source_paths(None) == ("", "")


def test_an_old_snapshot_without_the_fields_reads_them_as_empty(tmp_path):
    """A snapshot captured before `path`/`module_path` existed still loads; both read ""."""
    from guardpolicy.tools.capture import Snapshot

    _, _, seen = _capture("mlp")
    rows = [{k: v for k, v in r.items() if k not in ("path", "module_path")} for _, r, _ in seen]
    old = Snapshot(frames=[{"frame": 0, "code": "forward", "compile_id": "0/0", "entries": rows}],
                   torch=torch.__version__, schema_version=1)
    old.to_json(tmp_path / "old.json.gz")
    loaded = Snapshot.from_json(tmp_path / "old.json.gz").rows()
    assert "path" not in loaded[0]
    empty = gp.load('guardpolicy 1\nunsafe policy p {\n  drop when path == "" and module_path == ""\n  default keep\n}\n')
    assert empty.evaluate(loaded) == [False] * len(loaded)
    named = gp.load('guardpolicy 1\nunsafe policy p {\n  drop when path startswith "blocks."\n  default keep\n}\n')
    assert named.evaluate(loaded) == [True] * len(loaded)
    assert named.evaluate([r for _, r, _ in seen]).count(False) > 100  # the same rows with the fields
