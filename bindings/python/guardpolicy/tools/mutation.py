"""The guard-driven mutation audit: which of the guards a policy drops matter for a model.

For one model (any callable and its example inputs) and one policy:

1. compile it with the policy (``guardpolicy.compile``, so its ``config`` and ``stance``
   lines apply) and call it once under ``torch.no_grad()``; while torch offers the guards,
   record per guard its name, type, the policy's decision and deciding rule, and torch's own
   source object (``orig_guard.originating_source``), with the frame's scope (Dynamo's
   ``output_graph.local_scope``/``global_scope``: what torch's guard builder reads);
2. group the guards by the state they protect (the same source name in the same frame) and,
   for every group with a dropped guard, resolve the guarded value with torch's own
   ``Source.get_value`` on that scope;
3. per group, change that state one way at a time, the way the group's guards would notice
   (``plan_mutations``: a number changed, a bool flipped, a string changed, None <-> a
   value, a dict entry added or changed, a list grown, a module's class swapped for a
   subclass whose forward changes its output, a function rebound to one that changes its
   result, a forward hook added; tensors: dtype, shape, ``requires_grad``), compute eager's
   output on the changed state, call the compiled object, and undo the change (checked: the
   eager output after undoing equals the first one);
4. classify each change: **dangerous** (no recompile, and the output differs from eager's,
   or the stale code raised), **caught** (a kept guard failed: Dynamo compiled again, or the
   stance refused to), **harmless** (no recompile and the output equals eager's), or not
   applied (the value cannot be changed that way, or eager itself cannot run the changed
   state); a group is dangerous when one of its changes is, else caught, else harmless, else
   **not mutated** with the reasons.

The compiled object is reused for every change (a change a kept guard catches adds a cache
entry; ``recompile_limit`` is raised for the run so that torch never falls back to eager).
Importing this module does not import torch.
"""

from __future__ import annotations

import builtins
import copy
import dataclasses
import functools
import inspect
import contextlib
import json
import logging
import sys
import threading
import time
import types
import warnings
from collections import Counter
from typing import Any, Callable

from ..policy import Policy

OUTCOMES = ("dangerous", "caught", "harmless", "not mutated")

LEGEND = ("Per state a policy lets go unguarded, each change the dropped guards would notice: dangerous = no "
          "recompile and the output differs from eager's (or the stale code raised); caught = a kept guard "
          "failed and Dynamo recompiled; harmless = no recompile and the output equals eager's; not mutated = "
          "no such change can be made, or eager itself cannot run it (the reason is given). Counts are "
          "dropped guards.")

_REFUSED_RECOMPILE = ("Recompilation triggered with skip_guard_eval_unsafe stance",
                      "Detected recompile when torch.compile stance is 'fail_on_recompile'")

#: Guard types that guard no value a change could alter (ambient state, relations between
#: values, imports): never mutated, always reported.
_RELATIONAL = {"DUPLICATE_INPUT", "NO_TENSOR_ALIASING", "OBJECT_ALIASING", "WEAKREF_ALIVE",
               "TENSOR_SUBCLASS_METADATA_MATCH", "STORAGE_OVERLAPPING"}


class NotMutable(Exception):
    """A change that cannot be made (the reason is the message)."""


# --------------------------------------------------------------------------- recording


@dataclasses.dataclass
class RecordedGuard:
    frame: int
    name: str
    guard_type: str
    keep: bool
    rule: str  # "FILE:LINE" of the deciding rule, "default keep|drop" for the default
    has_value: bool
    source: Any = dataclasses.field(repr=False)
    attr: str | None = None  # NOT_PRESENT_IN_GENERIC_DICT: the attribute
    guard_source: str = ""  # the GuardSource member name (schema field guard_source)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "guard_type": self.guard_type, "guard_source": self.guard_source,
                "decision": "keep" if self.keep else "drop", "rule": self.rule}


@dataclasses.dataclass
class RecordedFrame:
    index: int
    code: Any
    local_scope: dict
    global_scope: dict


def _compiling_scope() -> tuple[Any, dict, dict] | None:
    """``(f_code, local_scope copy, global_scope)`` of the frame torch is building guards
    for (the ``output_graph`` argument of ``CheckFunctionManager.__init__`` up the stack)."""
    frame = sys._getframe(1)
    try:
        for _ in range(24):
            if frame is None:
                return None
            code = frame.f_code
            if code.co_name == "__init__" and "output_graph" in code.co_varnames:
                og = frame.f_locals.get("output_graph")
                if og is not None and hasattr(og, "local_scope"):
                    return frame.f_locals.get("f_code"), dict(og.local_scope), og.global_scope
            frame = frame.f_back
    finally:
        del frame
    return None


def _rule_text(explanation: Any, default: str) -> str:
    rule = explanation.rule
    if rule is None:
        return f"default {default}"
    return f"{rule.file}:{rule.line}"


class _RecordingPolicy(Policy):
    """Decides as ``inner``; while ``recording``, keeps every guard of every frame."""

    __slots__ = ("inner", "frames", "guards", "recording", "compiles")

    def __init__(self, inner: Policy):
        super().__init__(inner._compiled, getattr(inner, "_origin", None))
        self.inner = inner
        self.frames: list[RecordedFrame] = []
        self.guards: list[RecordedGuard] = []
        self.recording = True
        self.compiles = 0

    def __call__(self, entries):
        entries = list(entries)
        decisions = self.inner(entries)
        self.compiles += 1
        if self.recording:
            scope = _compiling_scope()
            index = len(self.frames)
            code, local_scope, global_scope = scope if scope is not None else (None, {}, {})
            self.frames.append(RecordedFrame(index, code, local_scope, global_scope))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                explanations = self.inner.explain(entries)
            default = self.inner.default_decision
            for entry, keep, expl in zip(entries, decisions, explanations):
                guard = entry.orig_guard
                keywords = getattr(getattr(guard, "create_fn", None), "keywords", None) or {}
                self.guards.append(RecordedGuard(
                    frame=index, name=str(entry.name), guard_type=str(entry.guard_type), keep=keep is True,
                    rule=_rule_text(expl, default), has_value=bool(entry.has_value),
                    source=guard.originating_source, attr=keywords.get("attr"),
                    guard_source=str(guard.source.name)))
        return decisions


# --------------------------------------------------------------------------- the call


class Call:
    """The model and its inputs; the compiled frame's root locals as bound arguments, so
    that a guard on an input (``L['x']``) can be changed by rebinding it."""

    def __init__(self, fn: Any, args: tuple, kwargs: dict):
        import torch

        self.fn, self.args, self.kwargs = fn, tuple(args), dict(kwargs)
        owner = type(fn).forward if isinstance(fn, torch.nn.Module) else fn
        self.code = getattr(owner, "__code__", None)
        self._self = isinstance(fn, torch.nn.Module)
        try:
            sig = inspect.signature(owner, follow_wrapped=False)
            self.bound = sig.bind(fn, *args, **kwargs) if self._self else sig.bind(*args, **kwargs)
        except (TypeError, ValueError):
            self.bound = None

    def run(self, target: Callable) -> Any:
        return target(*self.args, **self.kwargs)

    def set_local(self, name: str, value: Any) -> Callable[[], None]:
        """Rebinds the root local ``name`` (an argument); returns the undo."""
        if self.bound is None or name not in self.bound.arguments:
            raise NotMutable(f"{name} is not an argument of the call")
        if self._self and name == next(iter(self.bound.arguments)):
            raise NotMutable("the compiled model itself")
        saved = (self.args, self.kwargs, self.bound.arguments[name])
        self.bound.arguments[name] = value
        args, kwargs = self.bound.args, self.bound.kwargs
        self.args, self.kwargs = (tuple(args[1:]) if self._self else tuple(args)), dict(kwargs)

        def undo() -> None:
            self.args, self.kwargs, self.bound.arguments[name] = saved

        return undo


# --------------------------------------------------------------------------- reading and writing state


def _closure_vars() -> dict:
    from torch._dynamo.guards import _get_closure_vars

    return _get_closure_vars()


def _scope(frame: RecordedFrame) -> dict:
    return {"L": frame.local_scope, "G": frame.global_scope, "__builtins__": builtins.__dict__}


def read(source: Any, frame: RecordedFrame) -> Any:
    """The guarded value, as torch's guard builder reads it (``Source.get_value``)."""
    return source.get_value(_scope(frame), _closure_vars(), {})


def _dict_key(source: Any, container: Any, frame: RecordedFrame) -> Any:
    index = source.index
    if hasattr(index, "get_value"):  # ConstDictKeySource: a key by position
        return read(index, frame)
    return index


def assign(source: Any, value: Any, frame: RecordedFrame, call: Call, is_root: bool) -> Callable[[], None]:
    """Makes the state ``source`` reads hold ``value``; returns the undo. Raises
    ``NotMutable`` where that cannot be done."""
    from torch._dynamo import source as S

    kind = type(source).__name__
    if isinstance(source, S.LocalSource):
        if not is_root:
            raise NotMutable(f"L[{source.local_name!r}] is a local of a resume frame (after a graph break)")
        return call.set_local(source.local_name, value)
    if isinstance(source, S.GlobalSource):
        scope = frame.global_scope
        missing = object()
        old = scope.get(source.global_name, missing)
        scope[source.global_name] = value

        def undo_global() -> None:
            if old is missing:
                scope.pop(source.global_name, None)
            else:
                scope[source.global_name] = old

        return undo_global
    base = getattr(source, "base", None)
    if base is None:
        raise NotMutable(f"nothing to assign through ({kind})")
    if getattr(source, "_name_template", None) == "{0}":  # NNModuleSource and kin: the base's value
        return assign(base, value, frame, call, is_root)
    if isinstance(source, S.AttrSource):
        parent = read(base, frame)
        old = getattr(parent, source.member)
        _setattr(parent, source.member, value)
        return lambda: _setattr(parent, source.member, old)
    if isinstance(source, (S.GetItemSource, S.DictGetItemSource, S.DictSubclassGetItemSource)):
        if getattr(source, "index_is_slice", False):
            raise NotMutable("a slice")
        parent = read(base, frame)
        key = _dict_key(source, parent, frame)
        if isinstance(parent, tuple):
            items = list(parent)
            items[key] = value
            return assign(base, type(parent)(items) if type(parent) is tuple else parent._make(items),
                          frame, call, is_root)
        old = parent[key]
        dict.__setitem__(parent, key, value) if isinstance(parent, dict) else parent.__setitem__(key, value)

        def undo_item() -> None:
            if isinstance(parent, dict):
                dict.__setitem__(parent, key, old)
            else:
                parent[key] = old

        return undo_item
    raise NotMutable(f"cannot assign through a {kind}")


def _setattr(obj: Any, name: str, value: Any) -> None:
    """``setattr``, but straight into the instance dict for a module's own attributes (so
    that a float attribute stays a plain attribute, and ``training`` is only this module's)."""
    import torch

    if isinstance(obj, torch.nn.Module) and name in obj.__dict__:
        obj.__dict__[name] = value
    else:
        setattr(obj, name, value)


# --------------------------------------------------------------------------- changes


def perturb(out: Any) -> Any:
    """``out`` with every floating tensor ``x`` as ``x * 1.5 + 0.1 * x * x + 0.25`` (not
    affine, so that a normalization after it still shows the change), integer tensors
    ``+ 1`` and bool tensors negated: what a swapped submodule, a rebound function or an
    added hook returns. Not re-entered: a rebound function that perturb itself calls (a
    builtin of a shared builtins dict, e.g. GPT-2's) returns its plain result inside it."""
    if _PERTURBING.active:  # first, before anything that may call a rebound builtin (__import__)
        return out
    _PERTURBING.active = True
    try:
        return _perturbed(out)
    finally:
        _PERTURBING.active = False


def _perturbed(out: Any) -> Any:
    import torch
    from torch.utils import _pytree

    def one(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        if x.is_floating_point():
            return x * 1.5 + 0.1 * x * x + 0.25
        return ~x if x.dtype == torch.bool else x + 1

    return _pytree.tree_map(one, out)


class _Flag(threading.local):
    active = False


_PERTURBING = _Flag()  # perturb's own calls are not perturbed again


@dataclasses.dataclass
class Mutation:
    what: str  # e.g. "1.0 -> 2.5", "class Linear -> LinearAudited"
    apply: Callable[[], Callable[[], None]]  # makes the change, returns the undo
    guard_types: set = dataclasses.field(default_factory=set)  # the group's guard types that notice it


_SUBCLASSES: dict[type, type] = {}


def _audited_class(cls: type) -> type:
    """A subclass of the module class ``cls`` whose forward returns ``perturb(cls.forward(...))``
    (same call signature)."""
    if cls not in _SUBCLASSES:
        original = cls.forward

        @functools.wraps(original)
        def forward(self, *args, **kwargs):
            return perturb(original(self, *args, **kwargs))

        _SUBCLASSES[cls] = type(f"{cls.__name__}Audited", (cls,), {"forward": forward, "__module__": __name__})
    return _SUBCLASSES[cls]


def _plain_subclass(cls: type) -> type | None:
    """A subclass of ``cls`` adding nothing (a type change that keeps the behaviour), or
    None where ``cls`` cannot be subclassed."""
    key = ("plain", cls)
    if key not in _SUBCLASSES:
        try:
            _SUBCLASSES[key] = type(f"{cls.__name__}Audited", (cls,), {"__module__": __name__})
        except TypeError:
            _SUBCLASSES[key] = None
    return _SUBCLASSES[key]


def _rebound_function(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def rebound(*args, **kwargs):
        return perturb(fn(*args, **kwargs))

    return rebound


def _changed_scalar(v: Any) -> list[Any]:
    """Candidate values for a scalar constant, the first to try first."""
    if isinstance(v, bool):
        return [not v]
    if isinstance(v, int):
        return [v + 1]
    if isinstance(v, float):
        return [v * 2 + 0.5 if v == v and abs(v) != float("inf") else 1.0]
    if isinstance(v, str):
        return [v + "_changed"]
    if v is None:
        return [1.0, True, "changed"]  # None -> a value: the first one eager can run
    return []


def _retyped_scalar(v: Any) -> list[Any]:
    """A value of another type that a TYPE_MATCH notices: int <-> float of the same value."""
    if isinstance(v, bool):
        return [int(v)]
    if isinstance(v, int):
        return [float(v)]
    if isinstance(v, float) and v.is_integer():
        return [int(v)]
    return []


def _scalar_text(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:39] + "…"


_CONSTANT_TYPES = (bool, int, float, str, type(None))


def _is_constant(v: Any) -> bool:
    if isinstance(v, tuple):
        return all(isinstance(x, _CONSTANT_TYPES) for x in v)
    return isinstance(v, _CONSTANT_TYPES)


#: Guard types whose check is on the value itself (its identity or equality).
_VALUE_TYPES = {"CONSTANT_MATCH", "EQUALS_MATCH", "ID_MATCH"}
_CALLABLE_TYPES = {"FUNCTION_MATCH", "BUILTIN_MATCH", "CLOSURE_MATCH", "ID_MATCH"}
_DICT_KEY_TYPES = {"DICT_KEYS_MATCH", "DICT_KEYS", "DICT_LENGTH", "DICT_CONTAINS", "DICT_VERSION"}
_LENGTH_TYPES = {"LENGTH_CHECK", "SEQUENCE_LENGTH", "LIST_LENGTH", "TUPLE_ITERATOR_LEN"}


def plan_mutations(guards: list[RecordedGuard], value: Any, frame: RecordedFrame, call: Call,
                   is_root: bool) -> tuple[list[Mutation], list[str]]:
    """The changes to try for one group of guards (one source) whose value is ``value``:
    per guard type, the change that guard type notices (``Mutation.guard_types`` says which
    of the group's types notice each one); and the reasons for the guard types no change
    could be made for."""
    import torch

    source = guards[0].source
    planned: dict[str, Mutation] = {}
    reasons: list[str] = []

    def add(gtype: str, what: str, apply: Callable[[], Callable[[], None]]) -> None:
        planned.setdefault(what, Mutation(what, apply)).guard_types.add(gtype)

    def set_to(new: Any) -> Callable[[], Callable[[], None]]:
        return lambda: assign(source, new, frame, call, is_root)

    for g in guards:
        t = g.guard_type
        before = len(planned)
        if isinstance(value, torch.Tensor):
            if t == "TENSOR_MATCH":
                for what, new in _tensor_changes(value):
                    add(t, what, set_to(new))
        elif isinstance(value, torch.nn.Module):
            if t in ("TYPE_MATCH", "NN_MODULE"):
                add(t, f"class {type(value).__name__} -> {_audited_class(type(value)).__name__} "
                       f"(forward changes its output)", _swap_class(value))
            elif t == "ID_MATCH":
                add(t, f"replaced by a copy of class {_audited_class(type(value)).__name__}",
                    set_to(_audited_copy(value)))
            elif t == "NOT_PRESENT_IN_GENERIC_DICT" and g.attr == "forward":
                add(t, "instance attribute forward set (changes the output)", _shadow_forward(value))
        elif isinstance(value, dict):
            if t == "EMPTY_NN_MODULE_HOOKS_DICT":
                hook = _hook_change(source, frame)
                if hook is not None:
                    add(t, *hook)
            elif t in _DICT_KEY_TYPES - {"DICT_VERSION"}:
                add(t, *_dict_add(value))
            elif t == "DICT_VERSION":
                change = _dict_change(value)
                if change is not None:
                    add(t, *change)
            elif t == "TYPE_MATCH":
                sub = _plain_subclass(type(value))
                if sub is not None:
                    add(t, f"type {type(value).__name__} -> {sub.__name__} (same entries)", set_to(sub(value)))
        elif isinstance(value, (list, tuple)) and not (isinstance(value, tuple) and _is_constant(value)
                                                       and t in _VALUE_TYPES):
            if t in _LENGTH_TYPES | {"EQUALS_MATCH"} and value:
                add(t, f"{type(value).__name__} grown to {len(value) + 1} items (the last one repeated)",
                    _grow(value, set_to))
            elif t == "TYPE_MATCH":
                sub = _plain_subclass(type(value))
                if sub is not None:
                    add(t, f"type {type(value).__name__} -> {sub.__name__} (same items)", set_to(sub(value)))
        elif _is_constant(value):
            if t in _VALUE_TYPES:
                for what, new in _constant_changes(value):
                    add(t, what, set_to(new))
            elif t == "TYPE_MATCH":
                for new in _retyped_scalar(value):
                    add(t, f"{_scalar_text(value)} -> {_scalar_text(new)} (type "
                           f"{type(value).__name__} -> {type(new).__name__})", set_to(new))
            elif t in _LENGTH_TYPES and isinstance(value, tuple) and value:
                add(t, f"tuple grown to {len(value) + 1} items (the last one repeated)", _grow(value, set_to))
        elif isinstance(value, types.ModuleType):
            reasons.append(f"{t}: a Python module (an import): not replaced")
            continue
        elif isinstance(value, type):
            reasons.append(f"{t}: a class ({value.__name__}): not replaced")
            continue
        elif callable(value) and t in _CALLABLE_TYPES:
            add(t, f"{getattr(value, '__name__', 'function')} rebound (a wrapper that changes its result)",
                set_to(_rebound_function(value)))
        if len(planned) == before and not any(t in m.guard_types for m in planned.values()):
            reasons.append(f"{t}: no change known for a {type(value).__name__} value")
    return list(planned.values()), list(dict.fromkeys(reasons))


def _swap_class(m: Any) -> Callable[[], Callable[[], None]]:
    def apply() -> Callable[[], None]:
        old = m.__class__
        m.__class__ = _audited_class(old)
        return lambda: setattr(m, "__class__", old)

    return apply


def _audited_copy(m: Any) -> Any:
    new = copy.copy(m)
    new.__dict__ = dict(m.__dict__)
    new.__class__ = _audited_class(type(m))
    return new


def _shadow_forward(m: Any) -> Callable[[], Callable[[], None]]:
    def apply() -> Callable[[], None]:
        m.__dict__["forward"] = types.MethodType(_audited_class(type(m)).forward, m)
        return lambda: m.__dict__.pop("forward", None)

    return apply


def _grow(seq: Any, set_to: Callable) -> Callable[[], Callable[[], None]]:
    if isinstance(seq, list):
        def apply() -> Callable[[], None]:
            seq.append(copy.deepcopy(seq[-1]))
            return seq.pop

        return apply
    items = tuple(seq) + (copy.deepcopy(seq[-1]),)
    return set_to(type(seq)(items) if type(seq) is tuple else seq._make(items))


def _constant_changes(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, tuple):
        for i, item in enumerate(value):
            cands = _changed_scalar(item)
            if cands:
                new = value[:i] + (cands[0],) + value[i + 1:]
                return [(f"{_scalar_text(value)} -> {_scalar_text(new)}", new)]
        return []
    out = [(f"{_scalar_text(value)} -> {_scalar_text(c)}", c) for c in _changed_scalar(value)]
    if value is not None and not isinstance(value, bool):
        out.append((f"{_scalar_text(value)} -> None", None))
    return out


def _tensor_changes(value: Any) -> list[tuple[str, Any]]:
    import torch

    def like(t: Any, requires_grad: bool | None = None) -> Any:
        rg = value.requires_grad if requires_grad is None else requires_grad
        if isinstance(value, torch.nn.Parameter):
            return torch.nn.Parameter(t, requires_grad=rg)
        return t.requires_grad_(rg) if rg and t.is_floating_point() else t

    out = []
    base = value.detach()
    other = {torch.float32: torch.float64, torch.float64: torch.float32, torch.float16: torch.float32,
             torch.bfloat16: torch.float32, torch.int64: torch.int32, torch.int32: torch.int64}.get(value.dtype)
    if other is not None:
        out.append((f"dtype {str(value.dtype)[6:]} -> {str(other)[6:]}", like(base.to(other).clone())))
    if value.dim() > 0:
        grown = torch.cat([base, base.flip(0)], 0).clone()
        out.append((f"shape {tuple(value.shape)} -> {tuple(grown.shape)}", like(grown)))
    if value.is_floating_point():
        out.append((f"requires_grad {value.requires_grad} -> {not value.requires_grad}",
                    like(base.clone(), not value.requires_grad)))
    return out


def _dict_add(d: dict) -> tuple[str, Callable[[], Callable[[], None]]]:
    keys = list(d.keys())
    if keys and all(isinstance(k, str) and k.isdigit() for k in keys):
        key = str(max(int(k) for k in keys) + 1)  # a ModuleList's / Sequential's _modules
    else:
        key = "_guardpolicy_audit"
        while key in d:
            key += "_"
    value = copy.deepcopy(d[keys[-1]]) if keys else 0

    def apply() -> Callable[[], None]:
        dict.__setitem__(d, key, value)
        return lambda: dict.pop(d, key, None)

    return f"entry {key!r} added" + (" (a copy of the last)" if keys else ""), apply


def _dict_change(d: dict) -> tuple[str, Callable[[], Callable[[], None]]] | None:
    for k, v in d.items():
        cands = _changed_scalar(v) if _is_constant(v) and not isinstance(v, tuple) else []
        if cands:
            def apply(k=k, new=cands[0]) -> Callable[[], None]:
                old = d[k]
                dict.__setitem__(d, k, new)
                return lambda: dict.__setitem__(d, k, old)

            return f"entry {k!r}: {_scalar_text(v)} -> {_scalar_text(cands[0])}", apply
    return None


def _hook_change(source: Any, frame: RecordedFrame) -> tuple[str, Callable[[], Callable[[], None]]] | None:
    import torch

    member = getattr(source, "member", "")
    module = read(source.base, frame) if getattr(source, "base", None) is not None else None
    if not isinstance(module, torch.nn.Module):
        return None
    if member == "_forward_hooks":
        return ("forward hook added (changes the output)",
                lambda: module.register_forward_hook(lambda _m, _a, out: perturb(out)).remove)
    if member == "_forward_pre_hooks":
        return ("forward pre-hook added (changes the inputs)",
                lambda: module.register_forward_pre_hook(lambda _m, args: perturb(args)).remove)
    return None


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class Trial:
    mutation: str
    outcome: str  # dangerous, caught, harmless, not applied
    detail: str = ""
    guard_types: list = dataclasses.field(default_factory=list)  # the group's types that notice it

    def to_dict(self) -> dict[str, Any]:
        return {"mutation": self.mutation, "outcome": self.outcome, "detail": self.detail,
                "guard_types": self.guard_types}


def _worst(outcomes: Any) -> str:
    outcomes = set(outcomes)
    return next((o for o in ("dangerous", "caught", "harmless") if o in outcomes), "not mutated")


@dataclasses.dataclass
class GroupResult:
    """The guards protecting one piece of state (one source in one frame), the changes
    tried and the verdicts: per guard type, the worst outcome of the changes that type
    notices (dangerous, then caught, then harmless; none applied: not mutated); for the
    group, the worst over its types."""

    name: str
    frame: int
    guards: list[RecordedGuard]
    trials: list[Trial] = dataclasses.field(default_factory=list)
    reasons: list[str] = dataclasses.field(default_factory=list)

    @property
    def dropped(self) -> list[RecordedGuard]:
        return [g for g in self.guards if not g.keep]

    def verdict(self, guard_type: str) -> str:
        return _worst(t.outcome for t in self.trials if guard_type in t.guard_types)

    @property
    def outcome(self) -> str:
        return _worst(self.verdict(g.guard_type) for g in self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.name or "<ambient>", "frame": self.frame, "outcome": self.outcome,
                "guards": [{**g.to_dict(), "verdict": self.verdict(g.guard_type)} for g in self.guards],
                "trials": [t.to_dict() for t in self.trials], "reasons": self.reasons}


@dataclasses.dataclass
class MutationAudit:
    """One policy on one model: every group of guards it drops, classified."""

    model: str
    policy: str
    source: str
    backend: str
    offered: int = 0
    dropped: int = 0
    frames: int = 0
    groups: list[GroupResult] = dataclasses.field(default_factory=list)
    compile_s: float = 0.0
    audit_s: float = 0.0
    recompiles: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)

    def guard_counts(self) -> dict[str, int]:
        """Dropped guards per verdict."""
        c = Counter(grp.verdict(g.guard_type) for grp in self.groups for g in grp.dropped)
        return {o: c[o] for o in OUTCOMES}

    def guards_with(self, verdict: str) -> list[tuple[GroupResult, RecordedGuard]]:
        """``(group, guard)`` for every dropped guard with that verdict."""
        return [(grp, g) for grp in self.groups for g in grp.dropped if grp.verdict(g.guard_type) == verdict]

    def by_outcome(self, outcome: str) -> list[GroupResult]:
        return [g for g in self.groups if g.outcome == outcome]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "policy": self.policy, "source": self.source, "backend": self.backend,
                "guards_offered": self.offered, "guards_dropped": self.dropped, "frames": self.frames,
                "dropped_guards_by_outcome": self.guard_counts(), "compile_s": round(self.compile_s, 3),
                "audit_s": round(self.audit_s, 3), "recompiles": self.recompiles, "problems": self.problems,
                "groups": [g.to_dict() for g in self.groups]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def table(self, limit: int | None = None) -> str:
        return format_audit(self, limit)

    def __str__(self) -> str:
        return self.table()


def format_audit(a: MutationAudit, limit: int | None = None) -> str:
    """The text report of one policy: counts, then the dangerous groups (state, guards with
    the rule that dropped each, the change and what differed), then the caught ones and the
    reasons of the not mutated ones."""
    counts = a.guard_counts()
    lines = [f"== {a.model} · {a.policy} · {a.backend}: {a.offered} guards offered in {a.frames} frame(s), "
             f"{a.dropped} dropped, in {sum(1 for g in a.groups if g.dropped)} states; compile {a.compile_s:.1f} s, "
             f"mutations {a.audit_s:.1f} s ({a.recompiles} recompiles)",
             "   dropped guards: " + " · ".join(f"{o} {counts[o]}" for o in OUTCOMES)]
    for outcome in ("dangerous", "caught", "not mutated"):
        groups = a.by_outcome(outcome)
        if not groups:
            continue
        lines.append(f"   {outcome} ({len(groups)} states):")
        shown = groups if limit is None else groups[:limit]
        for g in shown:
            guards = ", ".join(f"{d.guard_type} ({g.verdict(d.guard_type)}) dropped by {d.rule}" for d in g.dropped)
            lines.append(f"     {g.name or '<ambient>'}: {guards}")
            for t in g.trials:
                if outcome != "not mutated" and t.outcome == outcome:
                    lines.append(f"       {t.mutation}: {t.detail or t.outcome}")
            if outcome == "not mutated":
                why = g.reasons or [f"{t.mutation}: {t.detail}" for t in g.trials]
                lines.append("       " + "; ".join(why))
        if limit is not None and len(groups) > limit:
            lines.append(f"     … {len(groups) - limit} more")
    for p in a.problems:
        lines.append(f"   ✗ {p}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- comparing


def compare(out: Any, ref: Any) -> str | None:
    """None when ``out`` equals ``ref`` leaf by leaf (tensors: shape, dtype,
    ``requires_grad``, values within float32 round-off), else what differs."""
    import torch
    from torch.utils import _pytree

    a, spec_a = _pytree.tree_flatten(out)
    b, spec_b = _pytree.tree_flatten(ref)
    if spec_a != spec_b:
        return "output structure differs"
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return f"shape {tuple(x.shape)}, eager {tuple(y.shape)}"
            if x.dtype != y.dtype:
                return f"dtype {str(x.dtype)[6:]}, eager {str(y.dtype)[6:]}"
            if x.requires_grad != y.requires_grad:
                return f"requires_grad {x.requires_grad}, eager {y.requires_grad}"
            if not torch.allclose(x.detach(), y.detach(), rtol=1e-4, atol=1e-5, equal_nan=True):
                diff = float((x.detach().double() - y.detach().double()).abs().max())
                return f"values differ (max |diff| {diff:.3g})"
        elif type(x) is not type(y) or x != y:
            return f"{_scalar_text(x)} != {_scalar_text(y)}"
    return None


def _short(e: BaseException, limit: int = 140) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- the audit


def _groups(rec: _RecordingPolicy, only_dropped: bool = True) -> list[GroupResult]:
    """The recorded guards grouped by state (source name and frame; an ambient guard is
    its own group), in offer order; only the groups with a dropped guard by default."""
    by_key: dict[tuple, GroupResult] = {}
    for g in rec.guards:
        key = (g.frame, g.name) if g.name else (g.frame, "", g.guard_type)
        if key not in by_key:
            by_key[key] = GroupResult(g.name, g.frame, [])
        by_key[key].guards.append(g)
    return [grp for grp in by_key.values() if grp.dropped or not only_dropped]


def _is_root(group: GroupResult, rec: _RecordingPolicy, call: Call) -> bool:
    frame = rec.frames[group.frame]
    return group.frame == 0 and (frame.code is None or frame.code is call.code)


def plan(fn: Any, args: tuple = (), kwargs: dict | None = None) -> tuple[Call, list[tuple[str, list[str], Mutation]]]:
    """Every change the audit would make on ``fn(*args, **kwargs)``, without classifying
    any: ``(call, [(state, guard types that notice it, Mutation), ...])``. Compiles once
    (eager backend, every guard kept) to read the guards and their scopes. ``call`` holds
    the inputs a change of an input rebinds; apply each ``Mutation`` (it returns its undo)
    and run ``call.run(target)`` to see its effect, e.g. on a compiled object of your own."""
    import torch
    import torch._dynamo

    from ..loading import load
    from ..runtime import compile as gp_compile

    rec = _RecordingPolicy(load("guardpolicy 1\npolicy keep_every_guard { default keep }\n"))
    call = Call(fn, args, dict(kwargs or {}))
    torch._dynamo.reset()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call.run(gp_compile(fn, rec, backend="eager"))
    finally:
        torch._dynamo.reset()
    rec.recording = False
    out = []
    for group in _groups(rec, only_dropped=False):
        if not group.name or not group.guards[0].has_value:
            continue
        frame = rec.frames[group.frame]
        try:
            value = read(group.guards[0].source, frame)
        except Exception:  # noqa: BLE001 - not readable: nothing to change
            continue
        mutations, _ = plan_mutations(group.guards, value, frame, call, _is_root(group, rec, call))
        out += [(group.name, sorted(m.guard_types), m) for m in mutations]
    return call, out


def _warmup_calls(policy: Policy) -> int:
    stance = getattr(policy, "stance", None)
    return stance[1] if stance and stance[0] == "skip_guard_eval_unsafe" else 0


def _audit_group(group: GroupResult, rec: _RecordingPolicy, call: Call, compiled: Any,
                 baseline: Any) -> None:
    import torch

    frame = rec.frames[group.frame]
    is_root = _is_root(group, rec, call)
    first = group.guards[0]
    if not group.name or not first.has_value:
        group.reasons.append(f"ambient state ({', '.join(sorted({g.guard_type for g in group.guards}))}): "
                             f"no value to change")
        return
    if {g.guard_type for g in group.guards} <= _RELATIONAL:
        group.reasons.append("a relation between values (aliasing, duplicate input): not changed")
        return
    try:
        value = read(first.source, frame)
    except Exception as e:  # noqa: BLE001 - reported as the reason
        group.reasons.append(f"cannot read it: {_short(e)}")
        return
    mutations, reasons = plan_mutations(group.guards, value, frame, call, is_root)
    group.reasons.extend(reasons)
    applied_none_value = False
    for m in mutations:
        if applied_none_value and m.what.startswith("None -> "):
            continue  # None -> a value: one candidate that eager runs is enough
        trial = _one_trial(m, rec, call, compiled)
        trial.guard_types = sorted(m.guard_types)
        group.trials.append(trial)
        if trial.outcome != "not applied" and m.what.startswith("None -> "):
            applied_none_value = True
        with torch.no_grad():
            restored = compare(call.run(call.fn), baseline)
        if restored is not None:
            raise RuntimeError(f"guardpolicy audit: undoing {m.what!r} on {group.name} did not restore the "
                               f"model: {restored}")


def _one_trial(m: Mutation, rec: _RecordingPolicy, call: Call, compiled: Any) -> Trial:
    import torch

    try:
        undo = m.apply()
    except NotMutable as e:
        return Trial(m.what, "not applied", str(e))
    except Exception as e:  # noqa: BLE001
        return Trial(m.what, "not applied", f"the change raised {_short(e)}")
    try:
        with torch.no_grad():
            try:
                ref = call.run(call.fn)
            except Exception as e:  # noqa: BLE001 - eager cannot run it: no valid state to audit
                return Trial(m.what, "not applied", f"eager raised {_short(e)}")
            before = rec.compiles
            error = None
            out = None
            try:
                out = call.run(compiled)
            except Exception as e:  # noqa: BLE001 - stale code may crash on the new state
                error = e
        if error is not None and any(s in str(error) for s in _REFUSED_RECOMPILE):
            return Trial(m.what, "caught", "a kept guard failed; the stance refused to recompile")
        if rec.compiles > before:
            return Trial(m.what, "caught", "a kept guard failed: recompiled")
        if error is not None:
            return Trial(m.what, "dangerous", f"no recompile, and the compiled code raised {_short(error)}")
        problem = compare(out, ref)
        if problem is None:
            return Trial(m.what, "harmless", "no recompile, output equals eager's")
        return Trial(m.what, "dangerous", f"no recompile, stale output: {problem}")
    finally:
        undo()


@contextlib.contextmanager
def _logger_at(logger: logging.Logger, level: int):
    old = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(old)


def audit(fn: Any, args: tuple = (), kwargs: dict | None = None, policy: Policy | str = "skip_all_guards", *,
          label: str = "model", policy_label: str | None = None, backend: str = "eager",
          verify: int | None = None, progress: Callable[[str], None] | None = None) -> MutationAudit:
    """Runs the mutation audit of ``policy`` (a ``Policy``, a std policy name or a file) on
    ``fn(*args, **kwargs)`` (see the module docstring) and returns a ``MutationAudit``.
    ``verify=N``: compiled with ``verify=N, on_violation="recompile"`` (docs/verify.md), so a
    change verify notices on the first call after it (N=1) recompiles and counts as caught;
    the violations the audit's own changes cause are recorded, not logged (the ``guardpolicy``
    logger is raised to ERROR meanwhile)."""
    import torch
    import torch._dynamo

    from ..loading import STD_POLICIES, load, load_std
    from ..runtime import compile as gp_compile

    source = policy if isinstance(policy, str) else getattr(policy, "source_file", "")
    if isinstance(policy, str):
        policy = load_std(policy) if policy in STD_POLICIES else load(policy)
    result = MutationAudit(label, policy_label or policy.name, str(source), backend)
    rec = _RecordingPolicy(policy)
    call = Call(fn, args, dict(kwargs or {}))
    torch._dynamo.reset()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small calls, many of them: one thread is steadier and faster on a busy machine
    quiet = _logger_at(logging.getLogger("guardpolicy"), logging.ERROR) if verify else contextlib.nullcontext()
    with quiet, torch._dynamo.config.patch(recompile_limit=1 << 20, accumulated_recompile_limit=1 << 20):
        try:
            checked = {"verify": verify, "on_violation": "recompile"} if verify else {}
            compiled = gp_compile(fn, rec, backend=backend, **checked)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                baseline = call.run(fn)
                t0 = time.perf_counter()
                first = call.run(compiled)
                result.compile_s = time.perf_counter() - t0
                for _ in range(_warmup_calls(policy)):
                    call.run(compiled)
            rec.recording = False
            problem = compare(first, baseline)
            if problem:
                result.problems.append(f"the compiled model differs from eager before any change: {problem}")
            result.frames = len(rec.frames)
            result.offered = len(rec.guards)
            result.dropped = sum(1 for g in rec.guards if not g.keep)
            result.groups = _groups(rec)
            compiles = rec.compiles
            t0 = time.perf_counter()
            for i, group in enumerate(result.groups):
                if progress:
                    progress(f"{label} · {result.policy} · {i + 1}/{len(result.groups)} {group.name or '<ambient>'}")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _audit_group(group, rec, call, compiled, baseline)
            result.audit_s = time.perf_counter() - t0
            result.recompiles = rec.compiles - compiles
        finally:
            rec.frames = []  # the scopes hold the model's objects: let them go
            torch._dynamo.reset()
            torch.set_num_threads(threads)
    return result
