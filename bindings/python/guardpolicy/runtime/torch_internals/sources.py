"""Where a guard reads its value and what it checks (``torch._dynamo.source``,
``torch._guards``, ``torch._dynamo.guards``, ``torch._dynamo.types``): Dynamo's source
classes, the guard-source enum, the guard types this torch produces, the names guard code
evaluates with, where the ``code`` field comes from, and how value guards compare floats.
"""

from __future__ import annotations

from typing import Any

import torch
import torch._dynamo.guards as _guards


def closure_vars() -> dict:
    """The names torch's guard code evaluates with beside ``L`` and ``G`` (``___check_obj_id``,
    ``___check_type_id``, ...): ``torch._dynamo.guards._get_closure_vars()``."""
    return _guards._get_closure_vars()


def dynamo_sources() -> Any:
    """The module of Dynamo's source classes (``torch._dynamo.source``: ``LocalSource``,
    ``GlobalSource``, ``AttrSource``, ``DictGetItemSource``, ...), which say where a guarded
    value is read from (``Source.get_value``)."""
    import torch._dynamo.source

    return torch._dynamo.source


def generic_attr_sources() -> tuple:
    """``(GenericAttrSource,)``, the source Dynamo reads an attribute by as
    ``object.__getattribute__(obj, 'name')`` when it traced a class's own ``__getattribute__``
    (a transformers config's; 2.11 to 2.15 have it), or ``()`` where this torch lacks it."""
    cls = getattr(dynamo_sources(), "GenericAttrSource", None)
    return (cls,) if cls is not None else ()


def installed_free(source: Any) -> bool:
    """Whether Dynamo installs the tensor read by ``source`` as a graph attribute under
    ``install_free_tensors`` (held by the compiled graph, not read on each call): a global's,
    a closure cell's, or an attribute of an unspecialized nn module's (a parameter, a buffer, a
    plain tensor attribute, a tensor in a config object or a list it holds). Torch's own test
    (``VariableBuilder``'s ``should_install_free_tensor``; 2.11 to 2.15 have all three)."""
    S = dynamo_sources()  # noqa: N806
    return (S.is_from_global_source(source) or S.is_from_nonlocal_source(source)
            or S.is_from_unspecialized_nn_module_source(source))


def traced_code(output_graph: Any) -> frozenset:
    """The code objects Dynamo traced for the frame being compiled, inlined calls included
    (``OutputGraph.traced_code``, the tracing context's list); empty where torch lacks it."""
    codes = getattr(output_graph, "traced_code", None)
    if codes is None:
        codes = getattr(getattr(output_graph, "tracing_context", None), "traced_code", ())
    return frozenset(codes)


def guard_source_enum() -> Any:
    """``torch._guards.GuardSource``, the enum of where a guarded value lives."""
    return torch._guards.GuardSource


def guard_builder_names() -> list[str]:
    """The guard types this torch produces, sorted: the names of ``GUARD_VALUE_DISPATCH``
    (``torch._dynamo.guards``; 45 on 2.12, 46 on 2.13, 47 on 2.14, 49 on 2.15), or on a torch without that
    table (2.11: 41) ``guard_builder_methods()``."""
    table = getattr(_guards, "GUARD_VALUE_DISPATCH", None)
    return sorted(table) if table is not None else guard_builder_methods()


def guard_builder_methods() -> list[str]:
    """The ``GuardBuilder`` methods that build a guard, sorted: public, upper-case, taking
    ``guard`` after ``self``. The rule torch 2.13+ checks its ``GUARD_VALUE_DISPATCH`` against
    (``MISSING_GUARD_SPECS``), so the same names where the table exists."""
    import inspect

    builder = getattr(_guards, "GuardBuilder", None)
    names = []
    for name in dir(builder) if builder is not None else ():
        method = getattr(builder, name, None)
        if not name[:1].isupper() or not callable(method):
            continue
        try:
            params = list(inspect.signature(method).parameters)
        except (TypeError, ValueError):
            continue
        if params[1:2] == ["guard"]:
            names.append(name)
    return sorted(names)


def guard_code_source() -> str:
    """Where the ``code`` field is read from on this torch: ``"code_parts"``
    (``GuardFilterEntry.code_parts``, 2.15), ``"code_list"`` (``Guard.code_list``, read while
    the filter runs: 2.11 to 2.14), or "" when neither exists."""
    import dataclasses

    import torch._dynamo.types

    def fields(cls: Any) -> set[str]:
        if dataclasses.is_dataclass(cls):
            return {f.name for f in dataclasses.fields(cls)}
        return set(getattr(cls, "_fields", ())) | set(getattr(cls, "__annotations__", {}))

    if "code_parts" in fields(getattr(torch._dynamo.types, "GuardFilterEntry", None)):
        return "code_parts"
    return "code_list" if "code_list" in fields(getattr(torch._guards, "Guard", None)) else ""


def value_guards_compare_bits() -> bool:
    """Whether value guards (EQUALS_MATCH, CONSTANT_MATCH, ...) compare floats bit for bit
    (torch 2.15, ``torch._dynamo.utils.constants_identical``: ``0.0`` and ``-0.0`` differ,
    NaN equals NaN) rather than with ``==`` (2.11 to 2.14: ``0.0 == -0.0``, NaN never equal)."""
    import torch._dynamo.utils

    return hasattr(torch._dynamo.utils, "constants_identical")


def duplicate_source(guard: Any) -> Any:
    """The other source of a ``DUPLICATE_INPUT`` guard (``source_b``, which torch binds into the
    guard's ``create_fn``, a ``functools.partial`` of ``GuardBuilder.DUPLICATE_INPUT``, on
    2.11 to 2.15), or None where it is not there."""
    keywords = getattr(getattr(guard, "create_fn", None), "keywords", None) or {}
    return keywords.get("source_b")
