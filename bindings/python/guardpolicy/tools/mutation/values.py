"""The values the mutation audit tries for a guarded value, both directions and at the
boundaries a model's code compares against.

* a bool: the other one;
* an int: 0, 1, -1, the value ± 1, half, double, a large value, and for a small non-negative
  int (a length, a count, an index: ``self.layers[: self.n_active]``) every smaller value
  down to 0;
* a float: 0.0, 1.0, -1.0, the value ± 1, half, double, a large value, NaN (an ``==`` guard
  notices it), and -0.0 where the guard notices it (a value other than 0.0, a torch whose
  value guards compare bits (2.15), or a check that reads the sign: ``copysign``, ``signbit``
  in the guard's code);
* for both, the numbers in the model's code nearest the value (``code_constants``: the ``2``
  of ``if self.k > 2``), each with its neighbours (± 1 for an int, ± 0.5 for a float);
* a string: another one and ``""``; ``None``: a value (the first eager can run) and back;
* a tuple of constants: each item's values (the first ``MAX_ITEMS`` items), one item fewer
  and one more;
* a module: a module of another class, and the same class with other shapes
  (``reshaped_copies``: one dimension size of its parameters halved or doubled, e.g. a
  LoRA adapter of another rank).

Importing this module does not import torch.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Iterator

LARGE_INT = 1 << 20
LARGE_FLOAT = 1e6
#: A non-negative int up to this is tried at every smaller value down to 0.
DOWN_TO_ZERO = 64
#: Items of a tuple whose values are tried one by one.
MAX_ITEMS = 4

_SIGN_AWARE = ("copysign", "signbit", "-0.0")


def text(v: Any) -> str:
    t = repr(v)
    return t if len(t) <= 40 else t[:39] + "…"


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are the same value: same type, NaN equal to NaN, -0.0 not 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


_same = same


def _unique(value: Any, cands: list[Any]) -> list[Any]:
    out: list[Any] = []
    for c in cands:
        if not _same(c, value) and not any(_same(c, o) for o in out):
            out.append(c)
    return out


#: Constants of the model's code tried per number (the nearest to its value).
MAX_CONSTANTS = 8


def _near(v: float, constants: tuple) -> list[float]:
    finite = [c for c in constants if math.isfinite(c)]
    return sorted(finite, key=lambda c: (abs(c - v), c))[:MAX_CONSTANTS]


def int_values(v: int, constants: tuple = ()) -> list[int]:
    cands = [0, 1, -1, v - 1, v + 1, v // 2, v * 2, LARGE_INT]
    if 0 < v <= DOWN_TO_ZERO:
        cands += list(range(v - 1, -1, -1))
    for c in _near(v, constants):  # `if self.k > 2`: 2 and both sides of it
        c = math.floor(c)
        cands += [c, c - 1, c + 1]
    return _unique(v, cands)


def float_values(v: float, code: tuple = (), constants: tuple = ()) -> list[float]:
    if not math.isfinite(v):
        return _unique(v, [0.0, 1.0, -1.0, LARGE_FLOAT])
    cands = [0.0, 1.0, -1.0, v - 1, v + 1, v / 2, v * 2, LARGE_FLOAT, math.nan]
    if v != 0.0 or _value_guards_compare_bits() or any(s in part for part in code for s in _SIGN_AWARE):
        cands.append(-0.0)
    for c in _near(v, constants):
        cands += [float(c), c - 0.5, c + 0.5]
    return _unique(v, cands)


def _value_guards_compare_bits() -> bool:
    """Whether this torch's value guards tell -0.0 from 0.0 (2.15: bit for bit), so that
    -0.0 is a change the guard of a 0.0 notices (docs/schema.md, "Between releases")."""
    from ...runtime import torch_internals

    return torch_internals.value_guards_compare_bits()


def _constants(codes: Any) -> Iterator[Any]:
    """The constants of code objects ``codes`` and of the code objects nested in them."""
    stack = list(codes)
    seen: set = set()
    while stack:
        code = stack.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        for c in code.co_consts:
            if hasattr(c, "co_consts"):
                stack.append(c)
            else:
                yield c


def code_constants(codes: Any) -> tuple:
    """The numbers (not bools) in the constants of code objects ``codes`` and the code
    objects nested in them: what a model's ``forward`` can compare a guarded number with."""
    return tuple(sorted({c for c in _constants(codes)
                         if isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) < 1e9}))


def code_strings(codes: Any, longest: int = 64) -> list[str]:
    """The short one-line strings (up to ``longest`` characters) in the constants of code
    objects ``codes`` and the code objects nested in them, in a fixed order: what a model's
    ``forward`` can compare a guarded string with (``"admin-"`` of ``startswith``)."""
    return sorted({c for c in _constants(codes) if isinstance(c, str) and 0 < len(c) <= longest and "\n" not in c})


def scalar_values(v: Any, code: tuple = (), constants: tuple = ()) -> list[Any]:
    """The values to try for a guarded constant ``v`` (see the module docstring), the
    boundaries first; ``constants``: numbers the model's code holds (``code_constants``),
    tried with their neighbours."""
    if isinstance(v, bool):
        return [not v]
    if isinstance(v, int):
        return int_values(v, constants)
    if isinstance(v, float):
        return float_values(v, code, constants)
    if isinstance(v, str):
        return _unique(v, [v + "_changed", ""])
    if v is None:
        return [1.0, True, "changed"]  # None -> a value: the first one eager can run
    return []


def tuple_values(value: tuple, code: tuple = (), constants: tuple = ()) -> list[tuple]:
    """Each of the first ``MAX_ITEMS`` items at its values, one item fewer, one more."""
    out: list[tuple] = []
    for i, item in enumerate(value[:MAX_ITEMS]):
        out += [value[:i] + (c,) + value[i + 1:] for c in scalar_values(item, code, constants)]
    if value:
        out += [value[:-1], value + value[-1:]]
    return out


def reshaped_copies(m: Any, limit: int = 2, max_modules: int = 4) -> list[tuple[str, Any]]:
    """``(what, make)``: ``make()`` returns a copy of module ``m`` of the same class with other
    shapes: per dimension size of its parameters (the smallest first: a rank, a head count),
    every dimension of that size halved or doubled (new values drawn at the old scale), and
    the module's int attributes equal to it likewise (``self.rank``). Only for small modules
    (at most ``max_modules`` in ``m.modules()``: an adapter, a projection), not a whole model."""
    if sum(1 for _ in m.modules()) > max_modules:
        return []
    sizes = sorted({d for p in list(m.parameters()) + list(m.buffers()) for d in p.shape if d > 1})
    out: list[tuple[str, Any]] = []
    for size in sizes:
        for new in (size * 2, size // 2):
            out.append((f"same class {type(m).__name__}, every dimension {size} -> {new}",
                        lambda size=size, new=new: _reshaped(m, size, new)))
            if len(out) >= limit:
                return out
    return out


def _reshaped(m: Any, size: int, new: int) -> Any:
    import torch

    copied = copy.deepcopy(m)
    gen = torch.Generator().manual_seed(size * 7919 + new)
    with torch.no_grad():
        for mod in copied.modules():
            for table in (mod._parameters, mod._buffers):
                for name, t in list(table.items()):
                    if t is None or size not in t.shape:
                        continue
                    shape = [new if d == size else d for d in t.shape]
                    scale = float(t.detach().float().std()) if t.numel() > 1 and t.is_floating_point() else 1.0
                    fresh = (torch.randn(shape, generator=gen) * (scale if math.isfinite(scale) else 1.0)).to(t.dtype)
                    table[name] = torch.nn.Parameter(fresh, t.requires_grad) if isinstance(
                        t, torch.nn.Parameter) else fresh
            for k, v in list(vars(mod).items()):
                if type(v) is int and v == size:
                    mod.__dict__[k] = new
    return copied
