"""The extractor's fast paths give exactly what the generic Python protocol gives.

bindings/fast_attr.h reads GuardFilterEntry attributes from the instance's inline values
(CPython 3.11's LOAD_ATTR_INSTANCE_VALUE check, in C++); bindings/type_checks.h answers
isinstance(value, torch.Tensor / torch.nn.Parameter / torch.nn.Module) from the types when
that is the same answer. Each test runs a policy with the fast paths on and off and against
plain Python, on real entries and on the cases that must fall back: another entry type, a
type changed after it was cached, a materialized instance __dict__, a deleted attribute,
__class__ proxies, and a patched Parameter metaclass.
"""

from __future__ import annotations

import dataclasses
import types
import sys
import warnings

import pytest
import torch
from torch._dynamo.types import GuardFilterEntry

import guardpolicy as gp
from guardpolicy import _core
from conftest import MODEL_NAMES

RULES = """guardpolicy 1
unsafe policy p {
  drop when is_global and guard_type == CONSTANT_MATCH
  keep when has_value and value.is_parameter
  drop when name contains "_modules" and guard_type in {TYPE_MATCH, ID_MATCH}
  keep when value.is_tensor and not value.is_buffer
  drop when value.is_module
  default keep
}
"""

INLINE = sys.version_info[:2] == (3, 11)  # fast_attr.h reads inline on CPython 3.11 only


def decide_in_python(e) -> bool:
    """RULES by hand."""
    v = e.value if e.has_value else None
    is_tensor = e.has_value and isinstance(v, torch.Tensor)
    is_param = e.has_value and isinstance(v, torch.nn.Parameter)
    if e.is_global and e.guard_type == "CONSTANT_MATCH":
        return False
    if e.has_value and is_param:
        return True
    if "_modules" in e.name and e.guard_type in ("TYPE_MATCH", "ID_MATCH"):
        return False
    if is_tensor:
        src, via_buffers = e.orig_guard.originating_source, False
        while hasattr(src, "base"):
            via_buffers = via_buffers or getattr(src, "member", None) == "_buffers"
            src = src.base
        if not (is_tensor and not is_param and via_buffers):
            return True
    if e.has_value and isinstance(v, torch.nn.Module):
        return False
    return True


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_fast_and_generic_paths_agree_on_real_entries(model, model_entries):
    entries = model_entries[model]
    policy = gp.load(RULES)
    want = [decide_in_python(e) for e in entries]
    assert policy(entries) == want
    fast = policy.explain(entries)
    _core._set_fast_paths(False)
    try:
        assert policy(entries) == want
        assert policy.explain(entries) == fast
    finally:
        _core._set_fast_paths(True)


@pytest.mark.skipif(not INLINE, reason="the inline read is CPython 3.11's layout; other versions read generically")
def test_guard_filter_entries_are_read_inline(model_entries):
    entries = model_entries["mlp"]
    gp.load(RULES)(entries)
    for attr in ("name", "guard_type", "is_global", "has_value", "value"):
        assert _core._reads_inline(entries[0], attr), attr
    _core._set_fast_paths(False)
    try:
        assert not _core._reads_inline(entries[0], "name")
    finally:
        _core._set_fast_paths(True)
    assert _core._reads_inline(entries[0], "name")


def _entry(name="x", value=None, has_value=True, guard_type="TENSOR_MATCH", is_global=False, cls=GuardFilterEntry):
    return cls(name=name, has_value=has_value, value=value, guard_type=guard_type, derived_guard_types=(),
               is_global=is_global, orig_guard=None)


NAME_POLICY = 'guardpolicy 1\nunsafe policy p {\n  drop when name == "renamed"\n}\n'
GLOBAL_POLICY = "guardpolicy 1\nunsafe policy p {\n  drop when is_global\n}\n"


def test_a_type_changed_after_it_was_cached_is_read_generically():
    class Entry(GuardFilterEntry):
        pass

    p = gp.load(NAME_POLICY)
    entries = [_entry("a", cls=Entry), _entry("renamed", cls=Entry)]
    assert p(entries) == [True, False]
    Entry.name = property(lambda self: "renamed")  # a data descriptor now wins over the instance value
    try:
        assert p(entries) == [False, False]
    finally:
        del Entry.name
    assert p(entries) == [True, False]


def test_a_subclass_with_a_property_is_read_through_it():
    class Everywhere(GuardFilterEntry):
        @property
        def is_global(self):
            return True

        def __init__(self, **kw):
            kw.pop("is_global")
            for k, v in kw.items():
                object.__setattr__(self, k, v)

    p = gp.load(GLOBAL_POLICY)
    entries = [_entry(is_global=False), _entry(is_global=False, cls=Everywhere), _entry(is_global=True)]
    assert p(entries) == [True, False, False]


def test_an_instance_with_a_materialized_dict_reads_the_same():
    p = gp.load(GLOBAL_POLICY)
    plain = [_entry(is_global=g) for g in (True, False)]
    assert p(plain) == [False, True]
    materialized = [_entry(is_global=g) for g in (True, False)]
    for e in materialized:
        vars(e)  # CPython moves the inline values into a real dict
    object.__setattr__(materialized[1], "is_global", True)  # through the dict now
    assert p(materialized + plain) == [False, False, False, True]


def test_a_deleted_attribute_is_an_entry_error_not_a_stale_read():
    p = gp.load(GLOBAL_POLICY)
    entries = [_entry(is_global=True), _entry(is_global=True)]
    assert p(entries) == [False, False]
    object.__delattr__(entries[1], "is_global")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert p(entries) == [False, True]  # on_error keep
    assert any("is_global" in str(w.message) for w in caught)


def test_duck_typed_entries_and_frozen_dataclass_copies_read_the_same():
    @dataclasses.dataclass(frozen=True)
    class Other:
        name: str
        is_global: bool

    p = gp.load(GLOBAL_POLICY)
    mixed = [_entry(is_global=True), Other("a", False), Other("b", True), _entry(is_global=False),
             dataclasses.replace(_entry(is_global=False), is_global=True)]
    assert p(mixed) == [False, True, False, True, False]


# --------------------------------------------------------------------------- isinstance


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


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "generic"])
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_value_type_fields_are_isinstance(field, fast):
    values = _values()
    entries = [_entry(name=k, value=v) for k, v in values.items()]
    p = gp.load(f"guardpolicy 1\nunsafe policy p {{\n  drop when {field}\n}}\n")
    want = [not isinstance(v, FIELDS[field]) for v in values.values()]
    _core._set_fast_paths(fast)
    try:
        got = p(entries)
    finally:
        _core._set_fast_paths(True)
    assert dict(zip(values, got)) == dict(zip(values, want))


def test_a_patched_parameter_metaclass_is_followed():
    """The Parameter shortcut holds only for torch's own _ParameterMeta.__instancecheck__;
    a replaced one is asked, whatever it says."""
    meta = type(torch.nn.Parameter)
    original = meta.__dict__["__instancecheck__"]
    entries = [_entry(name="d", value={"a": 1}), _entry(name="t", value=torch.zeros(1))]
    p = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when value.is_parameter\n}\n")
    assert p(entries) == [True, True]
    meta.__instancecheck__ = lambda cls, instance: True
    try:
        assert isinstance({}, torch.nn.Parameter)
        assert p(entries) == [False, False]
    finally:
        meta.__instancecheck__ = original
    assert p(entries) == [True, True]


class SlotEntry:
    """A duck-typed entry with __slots__ (read at the member's offset, LOAD_ATTR_SLOT)."""

    __slots__ = ("name", "is_global")

    def __init__(self, is_global=None):
        self.name = "s"
        if is_global is not None:
            self.is_global = is_global


def test_slots_entries_read_at_the_member_offset():
    p = gp.load(GLOBAL_POLICY)
    entries = [SlotEntry(True), SlotEntry(False), SlotEntry(True)]
    assert p(entries) == [False, True, False]
    if INLINE:
        assert _core._reads_inline(entries[0], "is_global")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert p([SlotEntry(True), SlotEntry()]) == [False, True]  # an unset slot: on_error keep
    assert any("is_global" in str(w.message) for w in caught)


def test_policy_call_is_a_method_of_policy_only():
    p = gp.load(GLOBAL_POLICY)
    assert p([SlotEntry(True)]) == [False]
    assert type(p).__call__(p, [SlotEntry(False)]) == [True]
    with pytest.raises(TypeError, match="exactly one argument"):
        p()
    with pytest.raises(TypeError, match="exactly one argument"):
        p([], [])
    with pytest.raises(TypeError):
        type(p).__call__(object(), [])


# --------------------------------------------------------------------------- properties

SOURCE_POLICY = "guardpolicy 1\nunsafe policy p {\n  drop when guard_source == GLOBAL\n}\n"


def _by_property(entries):
    return [e.orig_guard.source.name != "GLOBAL" for e in entries]


def test_guard_source_follows_a_patched_guard_source_property(model_entries):
    """Guard.source and GlobalSource.guard_source are read without calling them only while
    they are torch's own getters; patched, they are called."""
    from torch._dynamo.source import GlobalSource
    from torch._guards import Guard, GuardSource

    entries = model_entries["global_fn"]
    p = gp.load(SOURCE_POLICY)
    assert p(entries) == _by_property(entries)
    assert False in p(entries)  # the globals are GLOBAL

    original = Guard.__dict__["source"]
    Guard.source = property(lambda self: GuardSource.LOCAL)
    try:
        assert p(entries) == [True] * len(entries) == _by_property(entries)
    finally:
        Guard.source = original
    assert p(entries) == _by_property(entries)

    rooted = [i for i, e in enumerate(entries) if type(e.orig_guard.originating_source) is GlobalSource]
    assert rooted and not any(p(entries)[i] for i in rooted)
    original = GlobalSource.__dict__["guard_source"]
    GlobalSource.guard_source = property(lambda self: GuardSource.CONSTANT)
    try:
        assert p(entries) == _by_property(entries)
        assert all(p(entries)[i] for i in rooted)
    finally:
        GlobalSource.guard_source = original
    assert p(entries) == _by_property(entries)
    assert False in p(entries)


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


# --------------------------------------------------------------------------- found by review
# Each case once gave another answer than Python (or crashed); see the closing note of #4.

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


class SpoofsClass:
    def __getattribute__(self, n):
        return torch.Tensor if n == "__class__" else object.__getattribute__(self, n)


def test_a_class_spoofed_through_getattribute_is_seen():
    entries = [_guarded(SpoofsClass())]
    assert isinstance(SpoofsClass(), torch.Tensor)
    assert _policy("value.is_tensor")(entries) == [False]
    assert _policy("value.is_module")(entries) == [True]


def test_a_wrapped_or_replaced_parameter_check_is_followed():
    import functools

    meta = type(torch.nn.Parameter)
    original = meta.__dict__["__instancecheck__"]

    @functools.wraps(original)
    def wrapped(self, instance):
        return original(self, instance) or getattr(instance, "my_flag", False)

    flagged = torch.zeros(1)
    flagged.my_flag = True

    class MyParam(torch.nn.Parameter):
        pass

    p = _policy("value.is_parameter")
    try:
        meta.__instancecheck__ = wrapped
        assert p([_guarded(flagged)]) == [not isinstance(flagged, torch.nn.Parameter)] == [False]
        meta.__instancecheck__ = lambda self, instance: False
        mine = MyParam(torch.zeros(1))
        assert p([_guarded(mine)]) == [not isinstance(mine, torch.nn.Parameter)] == [True]
    finally:
        meta.__instancecheck__ = original
    assert p([_guarded(flagged), _guarded(MyParam(torch.zeros(1)))]) == [True, False]


def test_guard_source_overrides_that_keep_the_getter_are_followed():
    from torch._dynamo.source import GlobalSource, LocalSource
    from torch._guards import Guard, GuardSource

    p = _policy("guard_source == GLOBAL")
    assert p([_guarded()]) == [True]

    class Prop(property):  # a property subclass with its own __get__
        def __get__(self, obj, owner=None):
            return self if obj is None else GuardSource.GLOBAL

    original = Guard.__dict__["source"]
    Guard.source = Prop(original.fget)
    try:
        assert p([_guarded()]) == [False]
    finally:
        Guard.source = original

    class MySource(GlobalSource):
        def __getattribute__(self, n):
            return GuardSource.LOCAL if n == "guard_source" else super().__getattribute__(n)

    assert p([_guarded(source=MySource("g"))]) == [True]

    class MyGuard(Guard):
        def __getattribute__(self, n):
            return GuardSource.GLOBAL if n == "source" else super().__getattribute__(n)

    assert p([_guarded(guard_cls=MyGuard)]) == [False]

    local = p([_guarded()])
    fget = LocalSource.__dict__["guard_source"].fget
    code = fget.__code__
    namespace = {"GuardSource": GuardSource}
    exec("def g(self):\n    return GuardSource.GLOBAL\n", namespace)
    fget.__code__ = namespace["g"].__code__
    try:
        assert p([_guarded()]) == [False]
    finally:
        fget.__code__ = code
    assert p([_guarded()]) == local == [True]


def test_a_patched_guard_source_predicate_is_asked_again():
    from torch._guards import GuardSource

    p = _policy("guard_source.is_local")
    assert p([_guarded()]) == [False]
    original = GuardSource.__dict__["is_local"]
    GuardSource.is_local = lambda self: False
    try:
        assert p([_guarded()]) == [True]
        assert _policy("guard_source.is_local")([_guarded()]) == [True]
    finally:
        GuardSource.is_local = original
    assert p([_guarded()]) == [False]


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


def test_isinstance_that_runs_python_is_asked_once_per_value_and_call():
    """A value whose `__getattribute__` is Python (transformers' configs) must be asked by
    isinstance; the answer is remembered for that value object during the call."""
    calls = []

    class Config:
        def __getattribute__(self, name):
            calls.append(name)
            return object.__getattribute__(self, name)

    shared = Config()
    entries = [_guarded(shared) for _ in range(5)] + [_guarded(Config())]
    p = _policy("value.is_tensor")
    assert p(entries) == [not isinstance(e.value, torch.Tensor) for e in entries] == [True] * 6
    assert calls.count("__class__") == 2 + 6  # the policy: once per value; the list: once per entry
    calls.clear()
    assert p(entries) == [True] * 6
    assert calls.count("__class__") == 2  # again once per value in a new call


# --------------------------------------------------------------------------- second review

def test_a_parameter_check_whose_environment_changes_is_followed():
    import builtins

    import torch.nn.parameter as parameter_module

    meta = type(torch.nn.Parameter)
    original = meta.__dict__["__instancecheck__"]
    p = _policy("value.is_parameter")
    plain = torch.zeros(1)
    assert p([_guarded(plain)]) == [True]
    try:
        parameter_module.getattr = lambda obj, name, default=None: True  # read by torch's check
        assert isinstance(plain, torch.nn.Parameter)
        assert p([_guarded(plain)]) == [False]
    finally:
        del parameter_module.getattr
    assert p([_guarded(plain)]) == [True]

    real = builtins.isinstance

    class Duck:
        _is_param = True

    def patched(obj, cls):
        return True if type(obj) is Duck and cls is torch.Tensor else real(obj, cls)

    try:
        builtins.isinstance = patched
        assert isinstance(Duck(), torch.nn.Parameter)
        assert p([_guarded(Duck())]) == [False]
    finally:
        builtins.isinstance = real
    assert p([_guarded(Duck())]) == [True]
    assert meta.__dict__["__instancecheck__"] is original


def test_a_parameter_subclass_whose_is_param_raises():
    class Raising(torch.nn.Parameter):
        @property
        def _is_param(self):
            raise RuntimeError("no flag")

    value = Raising(torch.zeros(1))
    with pytest.raises(RuntimeError):
        isinstance(value, torch.nn.Parameter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _policy("value.is_parameter")([_guarded(value)]) == [True]  # on_error keep
    assert any("no flag" in str(w.message) for w in caught)


def test_type_getattribute_on_a_plain_class_is_not_taken_for_type_lookup():
    class Odd:
        __getattribute__ = type.__getattribute__

    with pytest.raises(TypeError):
        isinstance(Odd(), torch.Tensor)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _policy("not value.is_tensor")([_guarded(Odd())]) == [True]  # on_error keep
    assert caught


def test_guard_source_members_patched_in_ways_that_keep_the_class_version():
    from torch._guards import GuardSource

    p = _policy("guard_source.is_local")
    assert p([_guarded()]) == [False]
    fn = GuardSource.__dict__["is_local"]
    code = fn.__code__
    fn.__code__ = (lambda self: False).__code__
    try:
        assert p([_guarded()]) == [True]
    finally:
        fn.__code__ = code
    assert p([_guarded()]) == [False]


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


def test_a_getter_whose_globals_are_a_dict_subclass():
    import types as pytypes

    from torch._dynamo.source import LocalSource
    from torch._guards import GuardSource

    class Remap(dict):
        def __getitem__(self, key):
            value = super().__getitem__(key)
            return pytypes.SimpleNamespace(GLOBAL=GuardSource.LOCAL) if key == "GuardSource" else value

    scope = {}
    exec("def f(self):\n    return GuardSource.GLOBAL\n", scope)
    getter = pytypes.FunctionType(scope["f"].__code__, Remap(GuardSource=GuardSource, __builtins__=__builtins__))

    class Remapped(LocalSource):
        pass

    Remapped.guard_source = property(getter)
    entry = _guarded(source=Remapped("x"))
    assert entry.orig_guard.source is GuardSource.LOCAL
    assert _policy("guard_source == GLOBAL")([entry]) == [True]
