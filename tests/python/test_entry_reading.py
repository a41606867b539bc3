"""How the binding reads entries: what Python's getattr and isinstance give, with no
reference or string view outliving the call, and a policy callable again from inside a read.
(Kept from test_fast_paths.py when the CPython-internal fast paths went: these hold for the
public-API reads as well.)"""

from __future__ import annotations

import types
import warnings

import pytest
import torch
from torch._dynamo.types import GuardFilterEntry
from torch._guards import GuardSource

import guardpolicy as gp


def _entry(name="x", value=None, has_value=True, guard_type="TENSOR_MATCH", is_global=False, cls=GuardFilterEntry):
    return cls(name=name, has_value=has_value, value=value, guard_type=guard_type, derived_guard_types=(),
               is_global=is_global, orig_guard=None)


GLOBAL_POLICY = "guardpolicy 1\nunsafe policy p {\n  drop when is_global\n}\n"


def test_a_deleted_attribute_is_an_entry_error():
    p = gp.load(GLOBAL_POLICY)
    entries = [_entry(is_global=True), _entry(is_global=True)]
    assert p(entries) == [False, False]
    object.__delattr__(entries[1], "is_global")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert p(entries) == [False, True]  # on_error keep
    assert any("is_global" in str(w.message) for w in caught)


class ClaimsParameter:
    """A proxy whose __class__ says torch.nn.Parameter (isinstance believes it)."""

    @property
    def __class__(self):
        return torch.nn.Parameter


class ClaimsTensor:
    @property
    def __class__(self):
        return torch.Tensor


class TensorSubclass(torch.Tensor):
    pass


def _values():
    flagged = torch.zeros(2)
    flagged._is_param = True
    falsy_flag = torch.zeros(2)
    falsy_flag._is_param = 0
    return {
        "parameter": torch.nn.Parameter(torch.zeros(2)),
        "tensor": torch.zeros(2),
        "tensor with _is_param": flagged,
        "tensor with a false _is_param": falsy_flag,
        "tensor subclass": torch.zeros(2).as_subclass(TensorSubclass),
        "module": torch.nn.Linear(2, 2),
        "dict": {"a": 1},
        "int": 3,
        "str": "s",
        "claims Parameter": ClaimsParameter(),
        "claims Tensor": ClaimsTensor(),
        "type": torch.Tensor,
    }


FIELDS = {"value.is_tensor": torch.Tensor, "value.is_parameter": torch.nn.Parameter,
          "value.is_module": torch.nn.Module}


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_value_type_fields_are_isinstance(field):
    values = _values()
    entries = [_entry(name=k, value=v) for k, v in values.items()]
    p = gp.load(f"guardpolicy 1\nunsafe policy p {{\n  drop when {field}\n}}\n")
    want = [not isinstance(v, FIELDS[field]) for v in values.values()]
    assert dict(zip(values, p(entries))) == dict(zip(values, want))


class SlotEntry:
    """A duck-typed entry with __slots__ (read at the member's offset, LOAD_ATTR_SLOT)."""

    __slots__ = ("name", "is_global")

    def __init__(self, is_global=None):
        self.name = "s"
        if is_global is not None:
            self.is_global = is_global


class Reentrant:
    """An entry whose is_global runs the same policy on another entry (Python code run by
    a field read may call the policy again: the call in progress keeps its own state)."""

    def __init__(self, policy, inner, answer):
        self._policy, self._inner, self._answer = policy, inner, answer
        self.name = "r"

    @property
    def is_global(self):
        assert self._policy(self._inner) == [not e.is_global for e in self._inner]
        return self._answer


def test_a_policy_called_again_while_it_reads_an_entry():
    p = gp.load(GLOBAL_POLICY)
    inner = [SlotEntry(True), SlotEntry(False)]
    entries = [Reentrant(p, inner, True), SlotEntry(False), Reentrant(p, inner, False), SlotEntry(True)]
    for _ in range(3):
        assert p(entries) == [False, True, True, False]


def _guarded(value=1, source=None, guard_cls=None, name="x"):
    from torch._dynamo.source import LocalSource
    from torch._guards import Guard

    guard = (guard_cls or Guard)(source or LocalSource("x"), lambda *a: None)
    return GuardFilterEntry(name, True, value, "TENSOR_MATCH", (), False, guard)


def _policy(condition):
    return gp.load(f"guardpolicy 1\nunsafe policy p {{\n  drop when {condition}\n}}\n")


def test_the_result_list_is_not_reachable_half_filled():
    import gc

    class Evil:
        @property
        def name(self):
            for o in gc.get_objects():
                if type(o) is list and len(o) == 2:
                    o.copy()
            return "y"

    assert _policy('name == "x"')([Evil(), Evil()]) == [True, True]


def test_a_source_class_renamed_during_the_call():
    from torch._dynamo.source import LocalSource
    from torch._guards import Guard

    Dyn = type("Dyn" * 10, (LocalSource,), {})
    source = Dyn("x")

    class Renamer:
        orig_guard = Guard(LocalSource("q"), None)

        @property
        def name(self):
            Dyn.__name__ = Dyn.__qualname__ = "New"
            self.junk = ["Z" * 30 for _ in range(1000)]
            return "y"

    def make():
        return GuardFilterEntry("y", True, 1, "X", (), False, Guard(source, None))

    p = gp.load('guardpolicy 1\nunsafe policy p {\n  drop when name == "x"\n  drop when source.kind startswith "Z"\n}\n')
    assert [x.decision for x in p.explain([make(), Renamer(), make()])] == ["keep"] * 3
    assert gp.load('guardpolicy 1\nunsafe policy p {\n  drop when source.kind == "SimpleNamespace"\n}\n')(
        [types.SimpleNamespace(orig_guard=types.SimpleNamespace(originating_source=types.SimpleNamespace()))]
    ) == [False]


def test_torch_classes_are_read_when_the_policy_runs():
    import torch.nn as nn

    original = nn.Parameter

    class NewP(torch.Tensor):
        pass

    value = torch.zeros(1).as_subclass(NewP)
    p = _policy("value.is_parameter")
    try:
        nn.Parameter = NewP
        assert p([_guarded(value)]) == [not isinstance(value, torch.nn.Parameter)] == [False]
    finally:
        nn.Parameter = original
    assert p([_guarded(value)]) == [True]


# --------------------------------------------------------------------------- snapshot rows


def _edge_entry(entry_attrs=None, **guard_attrs):
    """A GuardFilterEntry over a stand-in guard (every attribute the extractor reads)."""
    frame = types.SimpleNamespace(filename="model.py", lineno=7, name="forward")
    guard = dict(source=GuardSource.LOCAL, originating_source=types.SimpleNamespace(), user_stack=[frame],
                 code_list=["L['x'] == 1", "L['y'] == 2", "L['x'] == 1"])
    guard.update(guard_attrs)
    entry = GuardFilterEntry(name="L['x']", has_value=False, value=None, guard_type="EQUALS_MATCH",
                             derived_guard_types=("TYPE_MATCH", "ID_MATCH"), is_global=False,
                             orig_guard=types.SimpleNamespace(**guard))
    if hasattr(entry, "code_parts"):  # torch 2.15: the code as the filter saw it, as torch fills it
        object.__setattr__(entry, "code_parts", None if guard["code_list"] is None else tuple(guard["code_list"]))
    for k, v in (entry_attrs or {}).items():
        object.__setattr__(entry, k, v)
    return entry


def _edge_entries():
    buffers = types.SimpleNamespace(base=types.SimpleNamespace(), member="_buffers")
    return {
        "plain": _edge_entry(),
        "a buffer value": _edge_entry({"has_value": True, "value": torch.zeros(2)}, originating_source=buffers),
        "no user stack": _edge_entry(user_stack=None),
        "frame attributes of other types": _edge_entry(
            user_stack=[types.SimpleNamespace(filename=1, lineno="7", name=None)]),
        "no code": _edge_entry(code_list=None),
        # torch 2.15's entry.code_parts wins over code_list, also when None (no code) or
        # when a part is empty (skipped: no leading newline)
        "code_parts None": _edge_entry({"code_parts": None}),
        "code_parts with an empty part": _edge_entry({"code_parts": ["", "L['z'] == 3"]}),
        "no derived guard types": _edge_entry({"derived_guard_types": ()}),
    }


def _probe(field, value):
    """A condition true exactly when `field` reads as `value` (a row value)."""
    if isinstance(value, bool):
        return field if value else f"not {field}"
    if isinstance(value, int):
        return f"{field} == {value}"
    if isinstance(value, list):
        return " and ".join(f"{field} contains {m}" for m in value) or None  # no literal for the empty set
    if field in ("guard_type", "guard_source"):
        return f"{field} == {value}"
    return f'{field} == "' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.mark.parametrize("label", list(_edge_entries()))
def test_a_snapshot_row_is_what_a_policy_reads_of_the_entry(label):
    """Each value of ``_core.entry_rows`` (what capture writes) is the value the VM reads of
    the live entry: a policy dropping when the field equals the row's value drops both the
    entry and the row."""
    from guardpolicy.tools.capture import FIELDS, entry_rows

    entry = _edge_entries()[label]
    (row,) = entry_rows([entry])
    assert tuple(row) == FIELDS
    for field, value in row.items():
        cond = _probe(field, value)
        if cond is None:
            continue
        p = gp.load(f"guardpolicy 1\nunsafe policy probe {{\n  drop when {cond}\n}}\n")
        assert p([entry]) == [False] and p.evaluate([row]) == [False], (field, value)


def test_snapshot_rows_read_code_and_frames_as_the_extractor_does():
    from guardpolicy.tools.common.snapshot import entry_rows

    rows = {label: entry_rows([e])[0] for label, e in _edge_entries().items()}
    assert rows["plain"]["code"] == "L['x'] == 1\nL['y'] == 2"
    assert rows["code_parts None"]["code"] == ""  # not code_list's
    assert rows["code_parts with an empty part"]["code"] == "L['z'] == 3"
    assert rows["plain"]["derived_guard_types"] == ["TYPE_MATCH", "ID_MATCH"]  # the entry's order
    assert (rows["no user stack"]["user_frame.file"], rows["no user stack"]["user_frame.line"]) == ("", 0)
    odd = rows["frame attributes of other types"]
    assert (odd["user_frame.file"], odd["user_frame.line"], odd["user_frame.function"]) == ("", 0, "")
    buf = rows["a buffer value"]
    assert buf["value.is_buffer"] and buf["value.type"] == "torch.Tensor" and buf["source.depth"] == 1


def test_a_field_the_extractor_cannot_read_fails_the_row_as_it_fails_the_policy():
    entry = _edge_entry({"name": None})
    from guardpolicy.tools.common.snapshot import entry_rows

    with pytest.raises(TypeError):
        entry_rows([entry])
    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when name == \"None\"\n}\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert p([entry]) == [True]  # an entry error: on_error keep, never the string "None"
    assert caught
