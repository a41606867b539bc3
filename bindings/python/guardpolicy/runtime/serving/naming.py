"""The guard that fails, named as ``guardpolicy.explain`` names it (``GuardFailure``), with the
value its cache entry expects and the one the call would give, from what torch's guard
manager says (``torch_internals.failing_parts``): a sentence of its own for a tensor's
metadata (``tensor 'L['x']' size mismatch at index 0. expected 2, actual 3``) and for global
state (``GLOBAL_STATE changed: grad_mode``), else the failing guard's code part
(``L['self'].n == 3``), whose operand is evaluated on the call's frame locals as torch's
``get_guard_fail_reason_helper`` evaluates it. guardpolicy's own guards say their part too:
a watch gate's text (``guardpolicy watch: 25 watched guards, 24 dicts: ...``, then the watched
guard that failed, from the group's own manager) and a retired entry's."""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any, Iterable

_TENSOR = re.compile(r"^tensor '(?P<source>.+?)' (?P<what>.*)$", re.S)
_MISMATCH = re.compile(r"^(?P<prop>[\w ]+?) mismatch(?: at index (?P<index>\d+))?\. expected (?P<expected>.+?), "
                       r"actual (?P<got>.+)$", re.S)
_REQUIRES_GRAD = re.compile(r"^requires_grad mismatch\. expected requires_grad=(?P<expected>\d)")
_GLOBAL_STATE = re.compile(r"^GLOBAL_STATE changed: (?P<fields>.*)$", re.S)
_OBJ_ID = re.compile(r"^___check_obj_id\((?P<operand>.+), (?P<id>\d+)\)")
_TYPE_ID = re.compile(r"^___check_type_id\((?P<operand>.+), (?P<id>\d+)\)(?:, type=(?P<type>.+))?$")
_SOURCE = re.compile(r"(?:L|G)\[[^\]]+\](?:\.\w+|\[[^\]]+\])*")
_SHAPE = re.compile(r"\.(size|stride)\(\)|storage_offset\(\)")
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.Lt: "<", ast.LtE: "<=",
        ast.Gt: ">", ast.GtE: ">=", ast.In: "in", ast.NotIn: "not in"}
#: The prefix of the text of guardpolicy's own guards in a kept manager (watch gates, retired entries).
WATCH_PREFIX = "guardpolicy watch:"
OWN_PREFIX = "guardpolicy"
_SHOWN = 80  # characters of a value's repr


@dataclasses.dataclass(frozen=True)
class GuardFailure:
    """The first guard of one cache entry that fails for a call.

    ``guard``: its name as ``guardpolicy.explain`` gives it (``"x"``, ``"self.n"``), or its
    guard type where explain gives none (``"GLOBAL_STATE"``, ``"SHAPE_ENV"``); ``guard_type``
    (``""`` when not known); ``expected``: what the entry was compiled for (``"2"`` for a size,
    ``"3"`` for ``self.n == 3``, ``"grad_mode=False"``); ``got``: what the call would give;
    ``reason``: torch's words for the failure (local scope stripped); ``decision`` (``keep``
    or ``watch``) and ``rule`` (the deciding rule, ``"default"``) of a guardpolicy object, else
    ``""``; ``watched``: the failure is a watched guard's, seen by guardpolicy's watch gate."""

    guard: str
    guard_type: str
    expected: str
    got: str
    reason: str
    decision: str = ""
    rule: str = ""
    watched: bool = False

    def __str__(self) -> str:
        kind = f" ({self.guard_type}{', watched' if self.watched else ''})" if self.guard_type else ""
        if self.expected or self.got:
            return f"{self.guard}{kind}: expected {self.expected}, got {self.got}"
        return f"{self.guard}{kind}: {self.reason}"


def name_failure(part: str, explanations: Iterable[Any] | None, manager: Any, f_locals: dict[str, Any],
                 watch_plans: Iterable[Any] = ()) -> GuardFailure:
    """The ``GuardFailure`` for ``part``, the text torch's ``check_verbose`` gave for the
    entry whose kept guard ``manager`` failed on ``f_locals``; ``explanations``: that entry's
    ``FrameExplanations`` (None for a plain ``torch.compile`` object); ``watch_plans``: the
    object's watched groups (``Watches.frames``), whose gate may be the guard that failed."""
    from .. import torch_internals as _tp

    explained = list(explanations or ())
    if part.startswith(WATCH_PREFIX):
        return _watched(part, explained, manager, f_locals, watch_plans)
    if part.startswith(OWN_PREFIX):
        return GuardFailure("(retired cache entry)", "", "", "", part)
    if (tensor := _TENSOR.match(part)) is not None:
        return _tensor(tensor, explained)
    if (state := _GLOBAL_STATE.match(part)) is not None:
        return _global_state(state, explained, part)
    code = " ".join(part.split("  #", 1)[0].split())
    found = _explained(code, explained)
    expected, got = _compared(code, manager, f_locals)
    if found is not None:
        return _with(found, found.name or found.guard_type, found.guard_type, expected, got, _tp.strip_local_scope(code))
    source = _SOURCE.search(code)
    if _SHAPE.search(code) and any(e.guard_type == "SHAPE_ENV" for e in explained):
        shape = next(e for e in explained if e.guard_type == "SHAPE_ENV")
        return _with(shape, "SHAPE_ENV", "SHAPE_ENV", expected, got, _tp.strip_local_scope(code))
    name = _tp.strip_local_scope(source.group(0)) if source else code
    return GuardFailure(name, "", expected, got, _tp.strip_local_scope(code))


def _with(explanation: Any, guard: str, guard_type: str, expected: str, got: str, reason: str,
          watched: bool = False) -> GuardFailure:
    rule = explanation.rule
    return GuardFailure(guard, guard_type, expected, got, reason, explanation.decision,
                        str(rule) if rule is not None else "default", watched)


def _explained(code: str, explained: list) -> Any:
    """The explanation whose code has the part ``code`` (a value guard before a type guard of
    the same code), or None."""
    found = [e for e in explained if e.code and code in (" ".join(p.split()) for p in e.code.splitlines())]
    return next((e for e in found if e.guard_type in ("EQUALS_MATCH", "CONSTANT_MATCH")), found[0] if found else None)


def _tensor(match: re.Match, explained: list) -> GuardFailure:
    from .. import torch_internals as _tp

    name = _tp.strip_local_scope(match.group("source"))
    what = match.group("what")
    reason = f"tensor '{name}' {what}"
    expected = got = ""
    if (m := _MISMATCH.match(what)) is not None:
        prop = m.group("prop") + (f"[{m.group('index')}]" if m.group("index") else "")
        expected, got = f"{prop} {m.group('expected')}", f"{prop} {m.group('got')}"
    elif (m := _REQUIRES_GRAD.match(what)) is not None:
        want = m.group("expected") == "1"
        expected, got = f"requires_grad={want}", f"requires_grad={not want}"
    found = next((e for e in explained if e.guard_type == "TENSOR_MATCH" and e.name == name), None)
    if found is not None:
        return _with(found, name, "TENSOR_MATCH", expected, got, reason)
    return GuardFailure(name, "TENSOR_MATCH", expected, got, reason)


def _global_state(match: re.Match, explained: list, part: str) -> GuardFailure:
    from .. import torch_internals as _tp

    now = _tp.global_state_now()
    fields = match.group("fields").split()
    expected, got = [], []
    for field in fields:
        value = now.get(field)
        if isinstance(value, bool):
            expected.append(f"{field}={not value}")
            got.append(f"{field}={value}")
        else:
            expected.append(f"{field} as compiled")
            got.append(f"{field}={value}" if value is not None else f"{field} changed")
    found = next((e for e in explained if e.guard_type == "GLOBAL_STATE"), None)
    reason = " ".join(part.split())
    if found is not None:
        return _with(found, "GLOBAL_STATE", "GLOBAL_STATE", ", ".join(expected), ", ".join(got), reason)
    return GuardFailure("GLOBAL_STATE", "GLOBAL_STATE", ", ".join(expected), ", ".join(got), reason)


def _watched(part: str, explained: list, manager: Any, f_locals: dict[str, Any], plans: Iterable[Any]) -> GuardFailure:
    """A watch gate failed: the watched guard that fails (its group's own manager), else what
    its state says changed (a hook, a class, a function the compiled code inlined)."""
    from .. import torch_internals as _tp

    plan = _plan_of(part, manager, plans)
    inner = _tp.failing_parts(plan.manager, f_locals) if plan is not None and plan.manager is not None else []
    if inner:
        found = name_failure(inner[0], [e for e in explained if e.watched] or explained, plan.manager, f_locals)
        return dataclasses.replace(found, watched=True, decision=found.decision or "watch")
    said = part.split("dicts: ", 1)[1] if "dicts: " in part else ""
    return GuardFailure("watched state", "", "as compiled", said or "changed", " ".join(part.split()), "watch",
                        "", True)


def _plan_of(part: str, manager: Any, plans: Iterable[Any]) -> Any:
    """The watched group whose gate is in ``manager`` and gave the text ``part``."""
    from ..watch.reads import deref

    candidates = [p for p in plans if p.reason is not None and part.startswith(p.reason_text)]
    mine = [p for p in candidates if deref(p.entry_manager) is manager]
    return (mine or candidates or [None])[0]


def _compared(code: str, manager: Any, f_locals: dict[str, Any]) -> tuple[str, str]:
    """``(expected, got)`` of a guard's code part: for ``A == B`` (and the other comparisons)
    ``B`` and the value of ``A`` now; for an identity or a type check, the id or type compiled
    for and the one found; else the condition and ``False``."""
    if (m := _OBJ_ID.match(code)) is not None:
        value = _value(m.group("operand"), manager, f_locals)
        return f"the object with id {m.group('id')}", (f"{type(value[1]).__qualname__} with id {id(value[1])}"
                                                       if value[0] else value[1])
    if (m := _TYPE_ID.match(code)) is not None:
        value = _value(m.group("operand"), manager, f_locals)
        return (m.group("type") or f"the type with id {m.group('id')}"), (repr(type(value[1])) if value[0] else value[1])
    try:
        tree = ast.parse(code, mode="eval").body
    except SyntaxError:
        tree = None
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and type(tree.ops[0]) in _OPS:
        lhs, rhs = ast.get_source_segment(code, tree.left), ast.get_source_segment(code, tree.comparators[0])
        op = _OPS[type(tree.ops[0])]
        ok, value = _value(lhs, manager, f_locals)
        got = _shown(value) if ok else value
        return (rhs if op in ("==", "is") else f"{op} {rhs}"), got
    return code, "False"


def _value(operand: str | None, manager: Any, f_locals: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, value)`` of a guard code's operand on ``f_locals``, or ``(False, why)``."""
    from .. import torch_internals as _tp

    try:
        return True, _tp.evaluate(operand or "", manager, f_locals)
    except Exception as error:  # noqa: BLE001 - the operand cannot be read there: say so
        return False, f"<{type(error).__name__}: {error}>"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."
