"""State snapshot and restore for the audits: they never change what they were given.

A ``Snapshot`` walks everything reachable from its roots (the model, the call's inputs, the
guarded globals, torch's global module hooks) and records, per object:

* a tensor (parameter, buffer, KV cache, input): its values (a clone), shape, strides,
  dtype, ``requires_grad`` and version counter; restored in place (``copy_`` under
  ``no_grad``) when its version counter moved, so the tensor object stays the same one. A
  module's buffer is also compared by value: ``BatchNorm`` in ``train()`` updates its running
  statistics inside ``native_batch_norm`` (and a compiled graph may write a buffer from a
  kernel) without moving the version counter;
* an ``nn.Module`` or any object with a ``__dict__`` (a HF config, a cache object): its class
  and its ``__dict__`` items (a module's ``_parameters``, ``_buffers``, ``_modules`` and hook
  dicts are walked as dicts); restored by identity, so a hook a trial or a library installs
  is removed and an attribute a trial set is put back;
* a dict, list or set: its items; a function: its closure cells and defaults;
* a mapping entry (``bind``: a global of the model's module): the object bound there.

``restore()`` puts every recorded piece back where it differs; ``differences()`` says what
differs now (the final check of an audit). Immutable values (numbers, strings, ``None``,
tuples of them), classes, functions' globals and Python modules are not walked.
Importing this module does not import torch.
"""

from __future__ import annotations

import math
import types
from typing import Any, Iterable

#: Walking stops after this many objects (a model that reaches half the interpreter).
MAX_OBJECTS = 200_000

_LEAVES = (str, bytes, int, float, complex, bool, type(None), type, types.ModuleType, range,
           types.BuiltinFunctionType, types.MethodWrapperType, types.WrapperDescriptorType)


class AuditStateError(RuntimeError):
    """The caller's model or inputs differ from the snapshot after the audit (restored)."""


def _same_values(t: Any, saved: Any) -> bool:
    """Whether tensor ``t`` holds the values of ``saved`` (same shape and dtype), NaN equal
    to NaN."""
    import torch

    with torch.no_grad():
        now = t.detach()
        return torch.equal(now, saved) or (now.is_floating_point() and bool(
            ((now == saved) | (now.isnan() & saved.isnan())).all()))


class _Tensor:
    __slots__ = ("t", "saved", "version", "shape", "stride", "dtype", "requires_grad", "by_value")

    def __init__(self, t: Any, reuse: "_Tensor | None", by_value: bool = False):
        import torch

        self.t = t
        self.by_value = by_value  # a buffer: written without a version bump (module docstring)
        self.version = t._version
        self.shape, self.dtype, self.requires_grad = tuple(t.shape), t.dtype, t.requires_grad
        self.stride = tuple(t.stride()) if t.layout == torch.strided else None
        if (reuse is not None and reuse.version == self.version and reuse.shape == self.shape
                and reuse.dtype == self.dtype and not (by_value and reuse.values_differ())):
            self.saved = reuse.saved  # unchanged since the base snapshot: share its copy
        else:
            with torch.no_grad():
                self.saved = t.detach().clone()

    def values_differ(self) -> bool:
        """The values differ from the saved copy (same shape and dtype assumed)."""
        return not _same_values(self.t, self.saved)

    def changed(self) -> bool:
        if (self.t._version != self.version or tuple(self.t.shape) != self.shape
                or self.t.dtype != self.dtype or self.t.requires_grad != self.requires_grad):
            return True
        return self.by_value and self.values_differ()

    def restore(self) -> None:
        import torch

        t = self.t
        with torch.no_grad():
            if tuple(t.shape) != self.shape or t.dtype != self.dtype or (
                    self.stride is not None and tuple(t.stride()) != self.stride):
                t.set_(self.saved.clone())
            elif t._version != self.version or self.by_value:
                t.copy_(self.saved)
        if t.requires_grad != self.requires_grad and t.is_leaf:
            t.requires_grad_(self.requires_grad)
        self.version = t._version

    def difference(self) -> str | None:
        import torch

        t = self.t
        if tuple(t.shape) != self.shape or t.dtype != self.dtype:
            return f"shape/dtype {tuple(t.shape)} {t.dtype}, was {self.shape} {self.dtype}"
        if t.requires_grad != self.requires_grad:
            return f"requires_grad {t.requires_grad}, was {self.requires_grad}"
        if _same_values(t, self.saved):
            return None
        with torch.no_grad():
            diff = (t.detach().double() - self.saved.double()).abs()
            return f"values changed (max |diff| {float(diff.nan_to_num(math.inf).max()):.3g})"


class Snapshot:
    """What ``roots`` hold now (see the module docstring); ``base``: an earlier snapshot
    whose tensor copies are shared where the tensor has not changed since."""

    def __init__(self, roots: Iterable[tuple[str, Any]], base: "Snapshot | None" = None,
                 bindings: Iterable[tuple[str, dict, str]] = ()):
        self.tensors: list[tuple[str, _Tensor]] = []
        self.objects: list[tuple[str, Any, type, list]] = []   # (path, obj, class, __dict__ items)
        self.mappings: list[tuple[str, dict, list]] = []       # (path, dict, items)
        self.lists: list[tuple[str, Any, list]] = []           # (path, list or set, items)
        self.cells: list[tuple[str, Any, Any]] = []            # (path, cell, contents)
        self.bindings: list[tuple[str, dict, str, Any]] = []   # (path, mapping, key, value)
        self._seen: set[int] = set()
        self._buffer_ids: set[int] = set()  # ids of the modules' buffers (compared by value)
        self.extend(roots, bindings, base)

    def extend(self, roots: Iterable[tuple[str, Any]] = (), bindings: Iterable[tuple[str, dict, str]] = (),
               base: "Snapshot | None" = None) -> None:
        """Records more roots (what is recorded already is not walked again)."""
        self._base = {id(rec.t): rec for _, rec in (base or self).tensors}
        for path, scope, key in bindings:
            if key in scope and not any(s is scope and k == key for _, s, k, _ in self.bindings):
                self.bindings.append((path, scope, key, scope[key]))
                self._walk(path, scope[key])
        for path, obj in roots:
            self._walk(path, obj)
        self._base = {}

    # ------------------------------------------------------------------ walking

    def _walk(self, path: str, root: Any) -> None:
        import torch

        stack = [(path, root)]
        while stack:
            path, obj = stack.pop()
            if isinstance(obj, _LEAVES) or id(obj) in self._seen:
                continue
            if len(self._seen) >= MAX_OBJECTS:
                return
            self._seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                self.tensors.append((path, _Tensor(obj, self._base.get(id(obj)), id(obj) in self._buffer_ids)))
                continue
            if isinstance(obj, dict):
                self.mappings.append((path, obj, list(obj.items())))
                stack.extend((f"{path}[{k!r}]", v) for k, v in reversed(list(obj.items())))
            elif isinstance(obj, (list, set)):
                self.lists.append((path, obj, list(obj)))
                stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(obj))))
            elif isinstance(obj, tuple):
                stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(obj))))
            elif isinstance(obj, types.FunctionType):
                for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
                    try:
                        contents = cell.cell_contents
                    except ValueError:  # an empty cell
                        continue
                    self.cells.append((f"{path}.<closure {name}>", cell, contents))
                    stack.append((f"{path}.<closure {name}>", contents))
            elif isinstance(obj, types.MethodType):
                stack.append((path, obj.__self__))
            elif isinstance(getattr(obj, "__dict__", None), dict):
                items = list(obj.__dict__.items())
                self.objects.append((path, obj, type(obj), items))
                module = isinstance(obj, torch.nn.Module)
                for k, v in reversed(items):
                    if module and k in _MODULE_DICTS and type(v) is dict and id(v) not in self._seen:
                        self._seen.add(id(v))  # named_modules() spelling: layers.0.attn.weight
                        if k == "_buffers":
                            self._buffer_ids.update(id(b) for b in v.values() if isinstance(b, torch.Tensor))
                        self.mappings.append((f"{path}.{k}", v, list(v.items())))
                        stack.extend((_dotted(path, n), x) for n, x in reversed(list(v.items())))
                    else:
                        stack.append((_dotted(path, k), v))

    # ------------------------------------------------------------------ restoring

    def restore(self) -> None:
        """Puts back every recorded piece of state that differs (idempotent)."""
        for _, scope, key, value in self.bindings:
            if scope.get(key, _MISSING) is not value:
                scope[key] = value
        for _, obj, cls, items in self.objects:
            if type(obj) is not cls:
                obj.__class__ = cls
            if not _same_items(obj.__dict__.items(), items):
                obj.__dict__.clear()
                obj.__dict__.update(items)
        for _, d, items in self.mappings:
            if not _same_items(d.items(), items):
                type(d).clear(d)
                for k, v in items:
                    dict.__setitem__(d, k, v) if type(d).__setitem__ is dict.__setitem__ else d.__setitem__(k, v)
        for _, seq, items in self.lists:
            if not _same_seq(seq, items):
                if isinstance(seq, list):
                    list.__setitem__(seq, slice(None), items)
                else:
                    seq.clear()
                    seq.update(items)
        for _, cell, contents in self.cells:
            if cell.cell_contents is not contents:
                cell.cell_contents = contents
        for _, rec in self.tensors:
            if rec.changed():
                rec.restore()

    def differences(self, limit: int = 3) -> list[str]:
        """What differs now from the snapshot, one line each (at most ``limit``)."""
        out: list[str] = []
        for path, scope, key, value in self.bindings:
            if scope.get(key, _MISSING) is not value:
                out.append(f"{path}: rebound")
        for path, obj, cls, items in self.objects:
            if type(obj) is not cls:
                out.append(f"{path}: class {type(obj).__name__}, was {cls.__name__}")
            elif not _same_items(obj.__dict__.items(), items):
                out.append(f"{path}: attributes {_keys_differing(obj.__dict__.items(), items)} changed")
        for path, d, items in self.mappings:
            if not _same_items(d.items(), items):
                out.append(f"{path}: entries {_keys_differing(d.items(), items)} changed")
        for path, seq, items in self.lists:
            if not _same_seq(seq, items):
                out.append(f"{path}: items changed")
        for path, cell, contents in self.cells:
            if cell.cell_contents is not contents:
                out.append(f"{path}: rebound")
        for path, rec in self.tensors:
            if len(out) >= limit:
                break
            diff = rec.difference()
            if diff is not None:
                out.append(f"{path}: {diff}")
        return out[:limit]

    def __len__(self) -> int:
        return len(self.tensors) + len(self.objects) + len(self.mappings) + len(self.lists) + len(self.cells)


#: What a mapping holds under a key it lacks (``differences``, ``written.capture``).
MISSING = _MISSING = object()


_MODULE_DICTS = ("_parameters", "_buffers", "_modules")


def dotted(path: str, key: Any) -> str:
    """The path of attribute ``key`` under ``path`` (``model.layers.0``)."""
    return f"{path}.{key}" if path else str(key)


_dotted = dotted


def _same_items(now: Iterable, was: list) -> bool:
    now = list(now)
    return len(now) == len(was) and all(k1 == k2 and v1 is v2 for (k1, v1), (k2, v2) in zip(now, was))


def same_seq(now: Any, was: list) -> bool:
    """List or set ``now`` holds the very items ``was`` lists (by identity; a set by membership)."""
    if isinstance(now, set):
        return len(now) == len(was) and all(x in now for x in was)
    return len(now) == len(was) and all(a is b for a, b in zip(now, was))


_same_seq = same_seq


def _keys_differing(now: Iterable, was: list) -> str:
    a, b = dict(now), dict(was)
    keys = [k for k in {**a, **b} if a.get(k, _MISSING) is not b.get(k, _MISSING)]
    text = ", ".join(repr(k) for k in keys[:4]) + (f", … {len(keys) - 4} more" if len(keys) > 4 else "")
    return text or "(order)"
