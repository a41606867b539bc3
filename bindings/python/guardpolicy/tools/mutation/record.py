"""The mutation audit's recording and state access: which guards torch offered (with the
frame's scope and torch's source objects), the call's arguments, and reading and writing the
value a guard's source names (``read``, ``assign``). Importing this module does not import
torch."""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import warnings
from typing import Any, Callable

from ...api.policy import Policy


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
    code: tuple = ()  # the guard's check code, e.g. ("L['self'].n_active == 3",)
    path: str = ""  # the schema field path: named_modules() spelling (``layers.0.attn``)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "guard_type": self.guard_type, "guard_source": self.guard_source,
                "path": self.path,
                "decision": "keep" if self.keep else "drop", "rule": self.rule}


@dataclasses.dataclass
class RecordedFrame:
    index: int
    code: Any
    local_scope: dict
    global_scope: dict


def _compiling_scope() -> tuple[Any, dict, dict] | None:
    """``(f_code, local_scope copy, global_scope)`` of the frame torch is building guards
    for (``torch_internals.compiling_frame``: the ``output_graph`` of torch's
    ``CheckFunctionManager.__init__``), or None outside a filter call."""
    from ...runtime import torch_internals

    found = torch_internals.compiling_frame()
    og = found.get("output_graph") if found else None
    if og is None or not hasattr(og, "local_scope"):
        return None
    return found.get("f_code"), dict(og.local_scope), og.global_scope


def _rule_text(explanation: Any, default: str) -> str:
    rule = explanation.rule
    if rule is None:
        return f"default {default}"
    return f"{rule.file}:{rule.line}"


class GuardRecorder:
    """Records every guard of every frame ``policy`` (``inner`` observed: it decides as
    ``inner``) is asked about, while ``recording``; ``compiles`` counts the frames."""

    def __init__(self, inner: Policy):
        self.inner = inner
        self.policy = inner.observed(self.observe)
        self.frames: list[RecordedFrame] = []
        self.guards: list[RecordedGuard] = []
        self.recording = True
        self.compiles = 0

    def observe(self, entries: list[Any], decisions: list[bool]) -> None:
        self.compiles += 1
        if not self.recording:
            return
        scope = _compiling_scope()
        index = len(self.frames)
        code, local_scope, global_scope = scope if scope is not None else (None, {}, {})
        self.frames.append(RecordedFrame(index, code, local_scope, global_scope))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            explanations = self.inner.explain(entries)
        default = self.inner.default_decision
        from ... import _core
        for entry, keep, expl in zip(entries, decisions, explanations):
            guard = entry.orig_guard
            keywords = getattr(getattr(guard, "create_fn", None), "keywords", None) or {}
            self.guards.append(RecordedGuard(
                frame=index, name=str(entry.name), guard_type=str(entry.guard_type), keep=keep is True,
                rule=_rule_text(expl, default), has_value=bool(entry.has_value),
                source=guard.originating_source, attr=keywords.get("attr"),
                guard_source=str(guard.source.name), code=tuple(expl.code.split("\n")) if expl.code else (),
                path=_core.source_paths(guard.originating_source)[0]))


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
    from ...runtime import torch_internals

    return torch_internals.closure_vars()


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
    from ...runtime import torch_internals

    S = torch_internals.dynamo_sources()  # noqa: N806 - Dynamo's source classes

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
    if isinstance(source, torch_internals.generic_attr_sources()):
        # `object.__getattribute__(obj, name)`: Dynamo traced a class's own __getattribute__
        # down to object's (a transformers config); written past the class's hooks likewise
        parent = read(base, frame)
        old = object.__getattribute__(parent, source.member)
        object.__setattr__(parent, source.member, value)
        return lambda: object.__setattr__(parent, source.member, old)
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


