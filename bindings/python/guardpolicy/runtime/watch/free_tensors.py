"""Where a compile installs free tensors (``config install_free_tensors = true``, the
``watch_state`` policy's) and where it passes them as graph inputs instead, as
``torch.compile`` does by default. A graph holds its installed tensors: a code object run with
other tensors each call, or by many instances of one module class, would compile once per
tensor set, where ``torch.compile`` compiles once.

* **Moved** (``MOVED_TENSORS``): a recheck found the code's installed tensors replaced at the
  same roots (a state tensor reassigned on every call, a submodule swapped), or other
  instances' tensors ``INSTANCES_WITH_FREE_TENSORS`` times (blocks of a model compiled one by
  one). Its later compiles, by any compiled object, pass them as inputs, as Dynamo makes a
  dimension dynamic once it changed; until ``torch.compiler.reset()`` (``forget``).
* **Unseen** (``unseen``): a frame whose installed tensor's ``TENSOR_MATCH`` stays checked
  because its source cannot be watched (a module held in a ``functools.partial`` hook's
  keywords): torch's guard compares its metadata, nothing its identity, so a replaced tensor
  would be served stale. The code is noted moved, and the cache entry is retired after its
  first call (``Watches.retire``): the next call compiles it with its tensors as inputs.
* **One of many** (``one_of_many``): a frame whose module is one of several instances of its
  class in the compiled model (a hook or a layer's forward run per layer, after a graph
  break: diffusers' layerwise casting, accelerate's offload hooks) passes them as inputs from
  its first compile: one graph serves every instance, as under ``torch.compile``.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

#: The code whose installed tensors a recheck found replaced (``note``).
MOVED_TENSORS: weakref.WeakSet = weakref.WeakSet()
#: Instances of one module class (copies, an ensemble, blocks compiled one by one) each get a
#: graph of their own tensors until a recheck has found other instances' tensors this many
#: times (``_OTHER_TENSORS``, per code); the next compile passes them as inputs.
INSTANCES_WITH_FREE_TENSORS = 4
_OTHER_TENSORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def note(code: Any, same_roots: bool) -> None:
    """A recheck of ``code``'s cache entry found its installed tensors replaced: at the same
    roots (``same_roots``), or another instance's."""
    if not same_roots:
        _OTHER_TENSORS[code] = _OTHER_TENSORS.get(code, 0) + 1
    if same_roots or _OTHER_TENSORS[code] >= INSTANCES_WITH_FREE_TENSORS:
        MOVED_TENSORS.add(code)


def forget(code: Any) -> None:
    """``code`` starts afresh (Dynamo holds no cache entry of it: after ``torch.compiler.reset()``)."""
    MOVED_TENSORS.discard(code)
    _OTHER_TENSORS.pop(code, None)


def unseen(entries: list, explanations: list, code: Any) -> str | None:
    """For a frame being compiled with free tensors (``code``, None where unknown): why its
    cache entry must be retired, when an installed tensor (``torch_internals.installed_free``)
    among its watched guards has a ``TENSOR_MATCH`` that stays checked
    (``Explanation.checked``): no one compares that tensor's identity. The code is noted moved
    (its next compile passes its tensors as inputs). None when there is none."""
    from .. import torch_internals

    if not torch_internals.config_value("install_free_tensors"):
        return None
    names = [exp.name for entry, exp in zip(entries, explanations)
             if exp.checked and exp.guard_type == "TENSOR_MATCH"
             and torch_internals.installed_free(entry.orig_guard.originating_source)]
    if not names:
        return None
    if code is not None:
        MOVED_TENSORS.add(code)
    return (f"guardpolicy watch: installed tensor {names[0]} is reached through state the watch cannot see; "
            "compiled again with the frame's tensors as graph inputs")


def as_inputs(code: Any, frame_locals: Any, model: Any) -> bool:
    """Whether a compile of ``code`` (its frame's locals ``frame_locals``, a mapping or None)
    passes the tensors as graph inputs: moved, or one of many in ``model`` (the compiled
    ``nn.Module``, or None)."""
    return code in MOVED_TENSORS or one_of_many(frame_locals, model)


def one_of_many(frame_locals: Any, model: Any) -> bool:
    """Whether a module among ``frame_locals``' values other than ``model`` itself is one of
    several instances of its class among ``model.modules()``."""
    if model is None or not frame_locals:
        return False
    from .roots import is_module

    local = [v for v in frame_locals.values() if v is not model and is_module(v)]
    if not local:
        return False
    counts = collections.Counter(map(type, model.modules()))  # at compile time only
    return any(counts[type(m)] > 1 for m in local)
