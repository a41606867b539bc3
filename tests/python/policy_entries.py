"""What test_policy_object_explain.py and test_policy_object_safety.py share: the policy
``MIXED`` (with the lines of its rules) and hand-built guard entries (``fake_entry``, whose
value is a weak-referenceable ``Payload``)."""

from __future__ import annotations

import types

MIXED = """guardpolicy 1

unsafe policy mixed {
  keep when guard_type in {GLOBAL_STATE, SHAPE_ENV}
  drop when is_global
  use skip_guard_on_all_nn_modules
  default keep
}
"""
# Lines of the rules above.
KEEP_AMBIENT_LINE, DROP_GLOBAL_LINE = 4, 5


class Payload:
    """A weak-referenceable guard value."""


class Entry(types.SimpleNamespace):
    """A hand-built guard entry (SimpleNamespace itself cannot be weakly referenced)."""

    __slots__ = ("__weakref__",)


def fake_entry(value, **kw):
    fields = dict(name="self.w", has_value=True, value=value, guard_type="TENSOR_MATCH",
                  derived_guard_types=("TENSOR_MATCH",), is_global=False,
                  orig_guard=types.SimpleNamespace(
                      source=types.SimpleNamespace(
                          name="LOCAL",
                          is_local=lambda: True,
                          is_unspecialized_nn_module=lambda: False,
                          is_unspecialized_builtin_nn_module=lambda: False,
                          is_specialized_nn_module=lambda: False,
                          is_fsdp_module=lambda: False),
                      originating_source=types.SimpleNamespace(),
                      user_stack=None))
    fields.update(kw)
    return Entry(**fields)
