"""A watched object's own ``__dict__`` on CPython 3.13+ (guardpolicy.runtime.watch.sources):
there an instance may keep its attributes in values stored inline in the object, which its
``__dict__`` only shares, and a write to such an attribute neither changes the dict's version
nor notifies a dict watcher (checked on 3.13.x)."""

from __future__ import annotations

import sys
import weakref
from typing import Any

#: ``Py_TPFLAGS_INLINE_VALUES`` (CPython 3.13): the type's instances keep their attributes inline.
_INLINE_VALUES = 1 << 2
#: id -> a weak reference to each object given a dict of its own. Not the dict: an object's
#: dict may hold the object (a bound method of it), and this table must not keep it alive. Once
#: given one, an object never shares inline values again: any dict it has later is its own.
_OWN_DICTS: dict[int, Any] = {}


def own_dict(obj: Any, current: dict) -> dict | None:
    """``obj.__dict__`` (``current``), made a dict of its own first on CPython 3.13+ where it
    shares inline values (the same contents, assigned to ``obj.__dict__`` once: from then on
    every write goes through the dict, which watchers see). None for such an object that
    cannot be referenced weakly (the assignment could not be remembered)."""
    if sys.version_info < (3, 13) or not type(obj).__flags__ & _INLINE_VALUES:
        return current
    known = _OWN_DICTS.get(id(obj))
    if known is not None and known() is obj:
        return current
    key = id(obj)
    try:
        ref = weakref.ref(obj, lambda _ref: _OWN_DICTS.pop(key, None))
    except TypeError:
        return None
    own = dict(current)
    object.__setattr__(obj, "__dict__", own)
    _OWN_DICTS[key] = ref
    return own
