"""Where a watched guard's source starts (guardpolicy.runtime.watch): the root object a chain of
Dynamo sources reads from (the frame's module, an object passed in ``*args``/``**kwargs``, a
global), and the groups of watched guards that share roots, each watched by a gate of its own
so that a new object at one root (per-request options passed on every call) makes only the
guards read through it be read again."""

from __future__ import annotations

import collections
import types
from typing import Any

IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range, slice)
UNWATCHABLE = (list, set, bytearray, collections.deque)


def chain_of(source: Any) -> list:
    """``source`` and its bases, down to its root (last)."""
    chain = [source]
    while hasattr(chain[-1], "base"):
        chain.append(chain[-1].base)
    return chain


def root_object(chain: list, scope: dict, closure: dict, cache: dict, S: Any) -> tuple[tuple, Any]:  # noqa: N803
    """Pops a local source's root off ``chain``, through the ``*args`` tuple and the ``**kwargs``
    dict a call passes anew: ``((local name, path), the object there)``."""
    name = chain[-1].local_name
    value = chain.pop().get_value(scope, closure, cache)
    path: list = []
    while isinstance(value, (tuple, dict)) and chain and _is_item(chain[-1], value, S):
        path.append(chain[-1].index)
        value = chain.pop().get_value(scope, closure, cache)
    return (name, tuple(path)), value


def groups(roots: list[set]) -> list[int]:
    """The group of each guard, given the roots each reads (``own_root`` of its sources):
    guards that share a root share a group (a ``DUPLICATE_INPUT`` joins those of both its
    sources); groups numbered from 0 in the order of their first guard, the lasting roots
    (None) in group 0 when any guard reads them."""
    merged: list[set] = []
    for keys in roots:
        joined = set(keys)
        for group in [g for g in merged if g & joined]:
            joined |= group
            merged.remove(group)
        merged.append(joined)
    merged.sort(key=lambda g: (None not in g, min(i for i, keys in enumerate(roots) if keys & g)))
    return [next(n for n, g in enumerate(merged) if keys & g) for keys in roots]


def _is_item(node: Any, container: Any, S: Any) -> bool:  # noqa: N803
    """Whether ``node`` reads one element of ``container`` by a plain key (``args[0]``,
    ``kwargs['cache']``)."""
    index = getattr(node, "index", None)
    if isinstance(container, tuple):
        return isinstance(node, S.GetItemSource) and isinstance(index, int)
    return isinstance(node, (S.DictGetItemSource, S.GetItemSource)) and isinstance(index, (str, int))


def is_object(value: Any) -> bool:
    """Whether ``value`` can be a root: an object with a ``__dict__`` (a module, a cache, a
    function), not a tensor nor a container."""
    import torch

    if isinstance(value, (torch.Tensor, type, types.ModuleType, dict, *IMMUTABLE, *UNWATCHABLE)):
        return False
    return isinstance(getattr(value, "__dict__", None), dict)


def is_module(value: Any) -> bool:
    import torch

    return isinstance(value, torch.nn.Module)


def own_root(key: tuple | None, reads: Any) -> tuple | None:
    """``key``, a root ``watch.sources.read`` returned, when the object there (in ``reads.roots``)
    is one of its own (a KV cache, an options object); None for the frame's lasting roots (a
    module, or a global: ``key`` None)."""
    return key if key is not None and not is_module(reads.roots[key]) else None
