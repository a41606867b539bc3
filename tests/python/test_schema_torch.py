"""The schema's two torch enums against the torch this suite runs on. CI runs the suite on
torch 2.11.0, 2.13.0, 2.14.1 and 2.15.0 (``make test`` and ``make test-python-matrix``), and a
local leg on 2.12.1 (``make test-python-leg PYVER=3.12 TORCH=2.12.1``), so each is checked on
every one: 2.11 lacks five guard types of 2.13 (``DICT_NOT_CONTAINS``, ...), 2.12 one
(``FAKE_SCRIPT_TYPE_MATCH``), 2.14 added ``COW_TENSOR_MATCH``, 2.15 two more, and a GuardSource
member torch adds must be in the
schema's closed enum, or the binding (which maps a source to the enum by its name) would read
it as no member, ``guard_source == NEW`` could not be written and a snapshot holding it would
be refused."""

from __future__ import annotations

import torch._dynamo.guards
import torch._guards
import yaml

import guardpolicy as gp
from guardpolicy.runtime.torch_internals import sources


def schema_enum(name: str) -> list[str]:
    schema = yaml.safe_load((gp.DATA_DIR / "schema" / "guard_entry.yaml").read_text())
    return schema["enums"][name]["members"]


def test_guard_type_members_include_every_guard_builder_name_of_this_torch():
    torch_names = set(sources.guard_builder_names())
    assert torch_names, "no guard types read from this torch"
    assert torch_names - set(schema_enum("GuardType")) == set()


def test_guard_builder_methods_are_the_dispatch_tables_names_where_torch_has_one():
    """torch 2.11 has no ``GUARD_VALUE_DISPATCH``: its guard types are read from
    ``GuardBuilder``'s methods instead, the rule 2.13+ checks the table against. Where the table
    exists the two agree; where it does not, the methods are what ``guard_builder_names`` says."""
    methods = sources.guard_builder_methods()
    table = getattr(torch._dynamo.guards, "GUARD_VALUE_DISPATCH", None)
    assert methods == (sorted(table) if table is not None else sources.guard_builder_names())
    assert {"TENSOR_MATCH", "EQUALS_MATCH", "GLOBAL_STATE", "SHAPE_ENV"} <= set(methods)


def test_guard_source_members_are_this_torchs_in_value_order():
    members = sorted(torch._guards.GuardSource, key=lambda m: m.value)
    assert schema_enum("GuardSource") == [m.name for m in members]



def _release(version: str) -> tuple[int, int]:
    return tuple(int(x) for x in version.split("+")[0].split(".")[:2])


def test_since_says_which_members_this_torch_produces():
    """A member with `since` newer than this torch is not produced here, and every member
    this torch produces that an older supported release lacks has its `since`."""
    schema = yaml.safe_load((gp.DATA_DIR / "schema" / "guard_entry.yaml").read_text())
    since = schema["enums"]["GuardType"]["since"]
    produced = set(sources.guard_builder_names())
    here = _release(torch.__version__)
    assert {m for m, r in since.items() if _release(r) > here} & produced == set()
    assert {m for m, r in since.items() if _release(r) <= here} <= produced
    members = set(schema_enum("GuardType"))
    assert members - set(since) <= produced  # a member without `since` is produced by every release
    assert set(since) == {"CONSTANT_SUBCLASS_MATCH", "COUNT_ITERATOR_MATCH", "DICT_NOT_CONTAINS",
                          "FAKE_SCRIPT_TYPE_MATCH", "SET_NOT_CONTAINS", "COW_TENSOR_MATCH",
                          "CURRENT_STREAM_MATCH", "LIST_REVERSEITERATOR_LEN"}


def test_a_member_of_a_newer_release_lints_clean_with_a_note_and_a_near_miss_is_an_error():
    note = gp.lint("guardpolicy 1\nunsafe policy p {\n  drop when guard_type == LIST_REVERSEITERATOR_LEN\n}\n")
    assert [(d.severity, d.code) for d in note] == [("note", "GP2020")]
    assert note[0].message == "torch 2.15 and later produce GuardType `LIST_REVERSEITERATOR_LEN`"
    typo = gp.lint("guardpolicy 1\nunsafe policy p {\n  drop when guard_type == CURRENT_STREAM_MACH\n}\n")
    assert [(d.severity, d.code, d.help) for d in typo] == [("error", "GP2002", "did you mean `CURRENT_STREAM_MATCH`?")]
