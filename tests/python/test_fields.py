"""Every schema field reads, from real GuardFilterEntry objects, what the schema's `from`
expression says (policies/schema/guard_entry.yaml), checked through policies that test
each field against each value it takes on the three models."""

from __future__ import annotations

import types

import pytest
import torch

import guardpolicy as gp
from conftest import MODEL_NAMES


def _walk(entry):
    src, depth, via_buffers = entry.orig_guard.originating_source, 0, False
    while hasattr(src, "base"):
        if getattr(src, "member", None) == "_buffers":
            via_buffers = True
        src, depth = src.base, depth + 1
    return src, depth, via_buffers


def _frame(entry):
    stack = entry.orig_guard.user_stack
    return stack[-1] if stack else None


def _value(entry):
    return entry.value if entry.has_value else None


def _is(entry, cls):
    return entry.has_value and isinstance(entry.value, cls)


# field -> the Python reference (the schema's `from`).
REFERENCE = {
    "name": lambda e: e.name,
    "is_global": lambda e: e.is_global,
    "has_value": lambda e: e.has_value,
    "guard_source": lambda e: e.orig_guard.source.name,
    "guard_source.is_local": lambda e: e.orig_guard.source.is_local(),
    "guard_source.is_unspecialized_nn_module": lambda e: e.orig_guard.source.is_unspecialized_nn_module(),
    "guard_source.is_unspecialized_builtin_nn_module":
        lambda e: e.orig_guard.source.is_unspecialized_builtin_nn_module(),
    "guard_source.is_specialized_nn_module": lambda e: e.orig_guard.source.is_specialized_nn_module(),
    "guard_source.is_fsdp_module": lambda e: e.orig_guard.source.is_fsdp_module(),
    "source.kind": lambda e: type(e.orig_guard.originating_source).__name__,
    "source.root": lambda e: type(_walk(e)[0]).__name__,
    "source.depth": lambda e: _walk(e)[1],
    "value.type": lambda e: (f"{type(e.value).__module__}.{type(e.value).__qualname__}" if e.has_value else ""),
    "value.is_tensor": lambda e: _is(e, torch.Tensor),
    "value.is_parameter": lambda e: _is(e, torch.nn.Parameter),
    "value.is_module": lambda e: _is(e, torch.nn.Module),
    "value.is_buffer": lambda e: (_is(e, torch.Tensor) and not _is(e, torch.nn.Parameter) and _walk(e)[2]),
    "user_frame.file": lambda e: _frame(e).filename if _frame(e) else "",
    "user_frame.line": lambda e: _frame(e).lineno if _frame(e) else 0,
    "user_frame.function": lambda e: _frame(e).name if _frame(e) else "",
    "code": lambda e: "\n".join(dict.fromkeys(
        str(p) for p in (e.code_parts if hasattr(e, "code_parts") else e.orig_guard.code_list or ()))),
}

MAX_VALUES = 30  # distinct values checked per field and model (spread over the sorted values)


def literal(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def condition(field: str, v) -> str:
    if field == "guard_source":
        return f"guard_source == {v}"
    if isinstance(v, bool):
        return field if v else f"not {field}"
    return f"{field} == {literal(v)}"


def spread(values):
    values = sorted(values, key=repr)
    if len(values) <= MAX_VALUES:
        return values
    step = len(values) / MAX_VALUES
    return [values[int(i * step)] for i in range(MAX_VALUES)]


def test_reference_covers_schema_fields():
    # guard_type and derived_guard_types are checked separately below; path and
    # module_path by resolving them on the models (test_paths.py).
    schema_fields = {"name", "guard_type", "derived_guard_types", "is_global", "has_value", "path", "module_path"}
    schema_fields |= set(REFERENCE)
    text = (gp.DATA_DIR / "schema" / "guard_entry.yaml").read_text()
    fields_section = text.split("\nfields:\n", 1)[1].split("\nconfig:\n", 1)[0]
    declared = {line.strip()[:-1] for line in fields_section.splitlines()
                if line.startswith("  ") and not line.startswith("   ") and line.strip().endswith(":")}
    assert declared == schema_fields


@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("field", sorted(REFERENCE))
def test_field_reads_what_the_schema_says(field, model, model_entries):
    entries = model_entries[model]
    refs = [REFERENCE[field](e) for e in entries]
    for v in spread(set(refs)):
        policy = gp.load(f"guardpolicy 1\nunsafe policy probe {{\n  drop when {condition(field, v)}\n}}\n")
        assert policy.fields == [field]
        got = policy(entries)
        want = [r != v for r in refs]
        bad = [(e.name, e.guard_type, r) for e, r, a, b in zip(entries, refs, got, want) if a != b]
        assert not bad, f"{field} == {v!r}: {len(bad)} entries differ, e.g. {bad[:3]}"


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_guard_types_and_derived_guard_types(model, model_entries):
    entries = model_entries[model]
    for gt in sorted({e.guard_type for e in entries}):
        p = gp.load(f"guardpolicy 1\nunsafe policy p {{\n  drop when guard_type == {gt}\n}}\n")
        assert p(entries) == [e.guard_type != gt for e in entries], gt
    derived = sorted({t for e in entries for t in e.derived_guard_types})
    assert derived
    for gt in derived:
        p = gp.load(f"guardpolicy 1\nunsafe policy p {{\n  drop when derived_guard_types contains {gt}\n}}\n")
        assert p(entries) == [gt not in e.derived_guard_types for e in entries], gt
    members = "{" + ", ".join(derived[:3]) + "}"
    p = gp.load(f"guardpolicy 1\nunsafe policy p {{\n  drop when guard_type not in {members}\n}}\n")
    assert p(entries) == [e.guard_type in derived[:3] for e in entries]


def test_buffer_and_parameter_on_mlp(model_entries):
    """The MLP's registered buffer reads as a buffer, its Linear/LayerNorm weights as parameters."""
    entries = model_entries["mlp"]
    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when value.is_buffer\n}\n")
    dropped = [e.name for e, keep in zip(entries, p(entries)) if not keep]
    assert dropped == ["self._buffers['offset']"]
    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when value.is_parameter\n}\n")
    dropped = {e.name for e, keep in zip(entries, p(entries)) if not keep}
    assert dropped == {f"self._modules['{m}']._parameters['{w}']" for m in ("fc", "norm") for w in ("weight", "bias")}


# --------------------------------------------------------------------------- open GuardType


def vendor_entry(guard_type, derived):
    return types.SimpleNamespace(guard_type=guard_type, derived_guard_types=derived)


def test_unknown_guard_type_compares_by_name():
    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when guard_type in {_vendor_TENSOR_MATCH, ID_MATCH}\n}\n")
    entries = [vendor_entry("_vendor_TENSOR_MATCH", ()), vendor_entry("ID_MATCH", ()),
               vendor_entry("TENSOR_MATCH", ()), vendor_entry("_vendor_OTHER", ())]
    assert p(entries) == [False, False, True, True]


def test_unknown_derived_guard_type_compares_by_name():
    """docs/language.md: GuardType is open; an unknown member `then compares by name`. That
    must hold for `derived_guard_types contains X` too (third-party builders put their own
    names there, e.g. `_spyre_TENSOR_MATCH`)."""
    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when derived_guard_types contains _vendor_MATCH\n}\n")
    entries = [vendor_entry("TENSOR_MATCH", ("_vendor_MATCH",)), vendor_entry("TENSOR_MATCH", ("TENSOR_MATCH",)),
               vendor_entry("TENSOR_MATCH", ())]
    assert p(entries) == [False, True, True]
    assert p.evaluate([{"derived_guard_types": ["_vendor_MATCH"]}, {"derived_guard_types": []}]) == [False, True]


# --------------------------------------------------------------------------- GuardSource predicates


class _Source:
    """A stand-in for a guard source whose predicates change between calls."""

    def __init__(self):
        self.name = "LOCAL"
        self.local = True
        self.calls = 0

    def is_local(self):
        self.calls += 1
        return self.local

    def is_specialized_nn_module(self):
        return False


def test_guard_source_predicates_are_asked_once_per_call_and_again_next_call():
    """Predicates are asked only when a rule needs them, once per source object and call,
    and again in the next call (an answer that changes is seen)."""
    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when guard_source.is_local\n}\n")
    source = _Source()
    entries = [types.SimpleNamespace(orig_guard=types.SimpleNamespace(source=source)) for _ in range(3)]
    assert p(entries) == [False, False, False]
    assert source.calls == 1
    source.local = False
    assert p(entries) == [True, True, True]
    assert source.calls == 2


def test_torch_guard_source_predicates_match_torch_across_calls():
    from torch._guards import GuardSource

    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when guard_source.is_unspecialized_nn_module\n}\n")
    for _ in range(2):  # the same answers in a second call
        entries = [types.SimpleNamespace(orig_guard=types.SimpleNamespace(source=m)) for m in GuardSource]
        assert p(entries) == [not m.is_unspecialized_nn_module() for m in GuardSource]
