"""The mutation audit's plan: per group of guards (one piece of state), the changes its
guards would notice (``plan_mutations``), each a ``Mutation`` that applies itself and returns
its undo. The candidate values themselves come from ``mutation_values``. Importing this
module does not import torch."""

from __future__ import annotations

import copy
import dataclasses
import functools
import threading
import types
from typing import Any, Callable

from .record import Call, RecordedFrame, RecordedGuard, assign, read
from . import values

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
    from ...runtime.torch_internals import tree_map

    def one(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        if x.is_floating_point():
            return x * 1.5 + 0.1 * x * x + 0.25
        return ~x if x.dtype == torch.bool else x + 1

    return tree_map(one, out)


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


def _changed_scalar(v: Any, code: tuple = (), constants: tuple = ()) -> list[Any]:
    """Candidate values for a scalar constant (``mutation_values.scalar_values``)."""
    return values.scalar_values(v, code, constants)


def _retyped_scalar(v: Any) -> list[Any]:
    """A value of another type that a TYPE_MATCH notices: int <-> float of the same value."""
    if isinstance(v, bool):
        return [int(v)]
    if isinstance(v, int):
        return [float(v)]
    if isinstance(v, float) and v.is_integer():
        return [int(v)]
    return []


_scalar_text = values.text


_CONSTANT_TYPES = (bool, int, float, str, type(None))


def is_constant(v: Any) -> bool:
    """A bool, int, float, str or None, or a tuple of them: a value Dynamo guards by ``==``."""
    if isinstance(v, tuple):
        return all(isinstance(x, _CONSTANT_TYPES) for x in v)
    return isinstance(v, _CONSTANT_TYPES)


_is_constant = is_constant


#: Guard types whose check is on the value itself (its identity or equality).
_VALUE_TYPES = {"CONSTANT_MATCH", "EQUALS_MATCH", "ID_MATCH"}
_CALLABLE_TYPES = {"FUNCTION_MATCH", "BUILTIN_MATCH", "CLOSURE_MATCH", "ID_MATCH"}
_DICT_KEY_TYPES = {"DICT_KEYS_MATCH", "DICT_KEYS", "DICT_LENGTH", "DICT_CONTAINS", "DICT_VERSION"}
_LENGTH_TYPES = {"LENGTH_CHECK", "SEQUENCE_LENGTH", "LIST_LENGTH", "TUPLE_ITERATOR_LEN"}


#: How a change to a value a real run gave the state ends (``plan_mutations``' ``seen``).
SEEN = " (seen in the run)"


def plan_mutations(guards: list[RecordedGuard], value: Any, frame: RecordedFrame, call: Call,
                   is_root: bool, constants: tuple = (), seen: Any = ()) -> tuple[list[Mutation], list[str]]:
    """The changes to try for one group of guards (one source) whose value is ``value``:
    per guard type, the change that guard type notices (``Mutation.guard_types`` says which
    of the group's types notice each one); and the reasons for the guard types no change
    could be made for. ``seen``: values a real run gave the state (constants), each tried
    too by the group's value guards (and its ``TYPE_MATCH`` for a value of another type),
    described ``old -> new (seen in the run)``."""
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
            if t in ("TYPE_MATCH", "NN_MODULE", "ID_MATCH") and type(source).__name__ != "LocalSource":
                for what, make in values.reshaped_copies(value):
                    add(t, what, lambda make=make: assign(source, make(), frame, call, is_root))
            elif t == "NOT_PRESENT_IN_GENERIC_DICT" and g.attr == "forward":
                add(t, "instance attribute forward set (changes the output)", _shadow_forward(value))
        elif isinstance(value, dict):
            if t == "EMPTY_NN_MODULE_HOOKS_DICT":
                hook = _hook_change(source, frame)
                if hook is not None:
                    add(t, *hook)
            elif t in _DICT_KEY_TYPES - {"DICT_VERSION"}:
                add(t, *_dict_add(value))
                if value:
                    add(t, *_dict_remove(value))
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
                add(t, f"{type(value).__name__} shrunk to {len(value) - 1} items (the last one removed)",
                    _shrink(value, set_to))
            elif t in _LENGTH_TYPES | {"EQUALS_MATCH"} and isinstance(value, list):
                for what, item in _first_items():  # empty (a history the forward appends to): one item
                    add(t, f"list grown to 1 item ({what})", _append(value, item))
            elif t == "TYPE_MATCH":
                sub = _plain_subclass(type(value))
                if sub is not None:
                    add(t, f"type {type(value).__name__} -> {sub.__name__} (same items)", set_to(sub(value)))
        elif _is_constant(value):
            if t in _VALUE_TYPES:
                for what, new in _constant_changes(value, g.code, constants):
                    if not _kills_the_process(source, frame, new):
                        add(t, what, set_to(new))
            elif t == "TYPE_MATCH":
                for new in _retyped_scalar(value):
                    add(t, f"{_scalar_text(value)} -> {_scalar_text(new)} (type "
                           f"{type(value).__name__} -> {type(new).__name__})", set_to(new))
            elif t in _LENGTH_TYPES and isinstance(value, tuple) and value:
                add(t, f"tuple grown to {len(value) + 1} items (the last one repeated)", _grow(value, set_to))
                add(t, f"tuple shrunk to {len(value) - 1} items", set_to(value[:-1]))
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
    types_here = {g.guard_type for g in guards}
    for new in seen:
        if not _is_constant(new) or values.same(new, value):
            continue
        noticed = types_here & _VALUE_TYPES | ({"TYPE_MATCH"} & types_here if type(new) is not type(value) else set())
        what = f"{_scalar_text(value)} -> {_scalar_text(new)}{SEEN}"
        for t in sorted(noticed):
            add(t, what, set_to(new))
    return list(planned.values()), list(dict.fromkeys(reasons))


#: Module attributes torch's CPU kernels divide by in C++ without a check (torch 2.13-2.15):
#: a value of 0 or less kills the process with SIGFPE (``nn.MultiheadAttention``'s fast path,
#: ``torch._native_multi_head_attention``), so no trial sets one.
POSITIVE_ATTRIBUTES = {"MultiheadAttention": ("num_heads",)}


def _kills_the_process(source: Any, frame: RecordedFrame, new: Any) -> bool:
    import torch

    member = getattr(source, "member", None)
    if not isinstance(new, (int, float)) or new > 0 or member is None or getattr(source, "base", None) is None:
        return False
    try:
        owner = read(source.base, frame)
    except Exception:  # noqa: BLE001 - not readable: nothing known against the value
        return False
    return any(isinstance(owner, getattr(torch.nn, cls)) and member in attrs
               for cls, attrs in POSITIVE_ATTRIBUTES.items())


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


def _shrink(seq: Any, set_to: Callable) -> Callable[[], Callable[[], None]]:
    if isinstance(seq, list):
        def apply() -> Callable[[], None]:
            last = seq.pop()
            return lambda: seq.append(last)

        return apply
    items = tuple(seq)[:-1]
    return set_to(type(seq)(items) if type(seq) is tuple else seq._make(items))


def _first_items() -> list[tuple[str, Any]]:
    """The items an empty list is grown by: what a history or a cache list holds (a 0-d
    tensor, a number); eager tells which one the model can run."""
    import torch

    return [("a 0-d tensor", torch.zeros(())), ("0", 0)]


def _append(seq: list, item: Any) -> Callable[[], Callable[[], None]]:
    def apply() -> Callable[[], None]:
        seq.append(item)
        return seq.pop

    return apply


def _dict_remove(d: dict) -> tuple[str, Callable[[], Callable[[], None]]]:
    key = list(d.keys())[-1]

    def apply() -> Callable[[], None]:
        items = list(d.items())
        dict.pop(d, key)

        def undo() -> None:
            dict.clear(d)
            dict.update(d, items)

        return undo

    return f"entry {key!r} removed", apply


def _grow(seq: Any, set_to: Callable) -> Callable[[], Callable[[], None]]:
    if isinstance(seq, list):
        def apply() -> Callable[[], None]:
            seq.append(copy.deepcopy(seq[-1]))
            return seq.pop

        return apply
    items = tuple(seq) + (copy.deepcopy(seq[-1]),)
    return set_to(type(seq)(items) if type(seq) is tuple else seq._make(items))


def _constant_changes(value: Any, code: tuple = (), constants: tuple = ()) -> list[tuple[str, Any]]:
    if isinstance(value, tuple):
        return [(f"{_scalar_text(value)} -> {_scalar_text(new)}", new)
                for new in values.tuple_values(value, code, constants)]
    out = [(f"{_scalar_text(value)} -> {_scalar_text(c)}", c) for c in _changed_scalar(value, code, constants)]
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


def _copy_or_same(value: Any) -> Any:
    """A deep copy of ``value``, or ``value`` itself when it cannot be copied (torch 2.11's
    guarded dicts hold objects whose ``_abc_data`` refuses to be pickled or copied)."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - any copy failure: the same object, added under a new key
        return value


def _dict_add(d: dict) -> tuple[str, Callable[[], Callable[[], None]]]:
    keys = list(d.keys())
    if keys and all(isinstance(k, str) and k.isdigit() for k in keys):
        key = str(max(int(k) for k in keys) + 1)  # a ModuleList's / Sequential's _modules
    else:
        key = "_guardpolicy_audit"
        while key in d:
            key += "_"
    value = _copy_or_same(d[keys[-1]]) if keys else 0

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


