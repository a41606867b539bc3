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
