"""What a call wrote: the pieces of recorded state a call changed, by value, and whether the
compiled call wrote what eager wrote.

After a call from the state a ``state.Snapshot`` holds, ``capture(snapshot)`` walks only the
snapshot's own records (no new walk of the model) and returns, per piece that differs from
it, what it holds now and what it held before, as values (``Written``):

* an attribute of an object or module (``self.step``), a dict entry, a global the frame's
  guards read, a closure cell: rebound (by identity);
* a list or set: its items changed (``self.history.append(x)``);
* an object's class;
* a tensor (a buffer, a KV cache, an input): its version counter moved (an in-place write),
  or, for a module's buffer, its values differ (``state._Tensor.changed``).

A value is kept as numbers and strings (compared by ``==``, NaN equal to NaN, the type
too), tensors (a detached clone, compared with ``torch.testing``'s tolerances through
``common.compare``), lists, tuples and sets item by item, dicts key by key, and any other
object by its type. Only the pieces a call changed are copied: a tensor the call did not write is not
cloned. ``differ(eager, compiled)`` compares two captures of calls from the same snapshot
and says, in one line, what the compiled call left otherwise, e.g. ``self.step is 1, eager
wrote 101``. Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .state import MISSING, Snapshot, dotted, same_seq

#: Containers are copied this deep (a list of dicts of tensors: 3); below it, by type.
MAX_DEPTH = 4
#: Items of one container copied; the rest are counted only.
MAX_ITEMS = 4096


@dataclasses.dataclass(frozen=True)
class _Object:
    """A value compared by its type only."""

    cls: type

    def __repr__(self) -> str:
        return f"a {self.cls.__name__}"


@dataclasses.dataclass(frozen=True)
class _Seq:
    cls: type
    items: tuple
    length: int

    def __repr__(self) -> str:
        return f"a {self.cls.__name__} of {self.length} items"


@dataclasses.dataclass(frozen=True)
class _Map:
    cls: type
    items: tuple  # (key, value) pairs

    def __repr__(self) -> str:
        return f"a {self.cls.__name__} of {len(self.items)} entries"


class _Absent:
    def __repr__(self) -> str:
        return "absent"


ABSENT = _Absent()

_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def value_of(v: Any, depth: int = 0) -> Any:
    """``v`` as a value that a later call cannot change (see the module docstring)."""
    import torch

    if v is MISSING:
        return ABSENT
    if isinstance(v, _SCALARS) or isinstance(v, type):
        return v
    if isinstance(v, torch.Tensor):
        with torch.no_grad():
            return v.detach().clone()
    if depth >= MAX_DEPTH:
        return _Object(type(v))
    if isinstance(v, (list, tuple, set, frozenset)):
        return _seq_value(type(v), list(v), depth)
    if isinstance(v, dict):
        return _Map(type(v), tuple((k, value_of(x, depth + 1)) for k, x in list(v.items())[:MAX_ITEMS]))
    return _Object(type(v))


def _seq_value(cls: type, items: list, depth: int = 0) -> _Seq:
    """The value of a ``cls`` holding ``items`` (a set's in the order of their reprs)."""
    length = len(items)
    if issubclass(cls, (set, frozenset)):
        try:
            items = sorted(items, key=repr)
        except Exception:  # noqa: BLE001 - a repr that raises: compared by count
            items = []
    return _Seq(cls, tuple(value_of(x, depth + 1) for x in items[:MAX_ITEMS]), length)


@dataclasses.dataclass
class Written:
    """One piece of state a call changed: ``path`` (the snapshot's spelling: ``model.step``),
    ``before`` and ``after`` (values, ``value_of``)."""

    path: str
    before: Any
    after: Any


def _items_written(key: tuple, path: str, now: dict, was: list, out: dict, leaf: Any) -> None:
    """The entries of ``now`` rebound since ``was`` (``(key, value)`` pairs): one ``Written``
    each, named ``leaf(path, key)``."""
    if len(now) == len(was) and all(now.get(k, MISSING) is v for k, v in was):
        return
    old = dict(was)
    for k in list(now) + [k for k in old if k not in now]:
        new, prev = now.get(k, MISSING), old.get(k, MISSING)
        if new is not prev:
            name = leaf(path, k)
            out[(*key, name)] = Written(name, value_of(prev), value_of(new))


def capture(snap: Snapshot) -> dict[tuple, Written]:
    """Every piece of ``snap``'s state that differs from it now (see the module docstring),
    keyed by kind and path."""
    out: dict[tuple, Written] = {}
    for path, scope, key, value in snap.bindings:
        now = scope.get(key, MISSING)
        if now is not value:
            out[("binding", path)] = Written(path, value_of(value), value_of(now))
    for path, obj, cls, items in snap.objects:
        if type(obj) is not cls:
            out[("class", path)] = Written(f"{path}.__class__", cls, type(obj))
        _items_written(("attr",), path, obj.__dict__, items, out, dotted)
    for path, d, items in snap.mappings:
        _items_written(("item",), path, dict(d.items()), items, out, lambda p, k: f"{p}[{k!r}]")
    for path, seq, items in snap.lists:
        if not same_seq(seq, items):
            out[("list", path)] = Written(path, _seq_value(type(seq), items), value_of(seq))
    for path, cell, contents in snap.cells:
        if cell.cell_contents is not contents:
            out[("cell", path)] = Written(path, value_of(contents), value_of(cell.cell_contents))
    for path, rec in snap.tensors:
        if rec.changed():
            out[("tensor", path)] = Written(path, rec.saved, value_of(rec.t))
    return out


def _text(v: Any) -> str:
    t = repr(v)
    return t if len(t) <= 40 else t[:39] + "…"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def difference(a: Any, b: Any, path: str) -> str | None:
    """None when values ``a`` (the compiled call's) and ``b`` (eager's) are equal, else one
    line naming the first difference under ``path``."""
    import torch

    from ..common.compare import compare

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path} is {_text(a)}, eager wrote {_text(b)}"
        problem = compare(a, b)
        return None if problem is None else f"{path}: {problem}"
    if type(a) is not type(b):
        return f"{path} is {_text(a)}, eager wrote {_text(b)}"
    if isinstance(a, _Seq):
        if a.length != b.length:
            return f"{path} holds {_count(a.length, 'item')}, eager's {b.length}"
        for i, (x, y) in enumerate(zip(a.items, b.items)):
            problem = difference(x, y, f"{path}[{i}]")
            if problem is not None:
                return problem
        return None
    if isinstance(a, _Map):  # by key: an order of insertion alone is no difference
        da, db = dict(a.items), dict(b.items)
        if set(da) != set(db):
            return f"{path} has keys {_text(list(da))}, eager's {_text(list(db))}"
        for k, x in da.items():
            problem = difference(x, db[k], f"{path}[{k!r}]")
            if problem is not None:
                return problem
        return None
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return None
    try:
        same = bool(a == b)
    except Exception:  # noqa: BLE001 - an == that raises: not equal
        same = False
    return None if same else f"{path} is {_text(a)}, eager wrote {_text(b)}"


def differ(eager: dict[tuple, Written], compiled: dict[tuple, Written], skip: set = frozenset(),
           rename: Any = None) -> str | None:
    """The first piece that the compiled call (``compiled``, a ``capture`` after it) left
    otherwise than eager (``eager``, a ``capture`` after eager's call from the same
    snapshot), in one line; None when every piece written by either holds the same value.
    A piece only one of them wrote holds its ``before`` value in the other. ``skip``: keys
    not compared (state that differs between two eager calls); ``rename(path)``: the path
    as the report names it."""
    for key in list(eager) + [k for k in compiled if k not in eager]:
        if key in skip:
            continue
        e, c = eager.get(key), compiled.get(key)
        written = e or c
        path = rename(written.path) if rename else written.path
        problem = difference(c.after if c else written.before, e.after if e else written.before, path)
        if problem is not None:
            return problem
    return None


def unrepeatable(first: dict[tuple, Written], second: dict[tuple, Written]) -> set[tuple]:
    """The keys whose values two calls from the same snapshot left different (a clock read,
    an id drawn): not state the audit can judge."""
    return {k for k in set(first) | set(second)
            if differ({k: first[k]} if k in first else {}, {k: second[k]} if k in second else {}) is not None}
