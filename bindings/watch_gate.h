// watch_gate.h: guardpolicy._core.WatchGate, the per-call check of a cache entry's watched
// guards (docs/design-notes/watch.md).
//
// A WatchGate is added to a cache entry's kept guard manager as an epilogue lambda guard, so
// torch calls it with the frame locals (a dict) once the entry's kept guards have passed. It
// holds strong references to the dicts the entry's watched guards read (instance __dict__s,
// _modules/_parameters/_buffers, hook dicts; a class stands for its own dict), the objects
// the watched sources start from (`roots`: (local name, path, object or a weak reference),
// e.g. the module bound to `self`, `args[0]` of a `*args` wrapper, a KV cache passed as
// `kwargs['cache']`) and `keyed` triples: (dict, key, value) for dicts read by key and too
// busy to watch whole (a module's globals, which its top-level code writes), and (object,
// None, its __dict__) for objects whose `__dict__` may be reassigned.
//
// While none of the dicts changed, every root is the recorded object and every keyed value is
// in place, a call returns the verdict of the last check, and a pass also needs
// `tensor_check(*tensors)` (the parameters read by watched guards, whose metadata `.half()` or
// `param.data = other` changes without any dict changing: torch's TensorGuards, one C call).
// No Python code runs. Otherwise it calls `recheck(f_locals, changed)` (`changed` False: only
// a root differs), counts it in `rechecks`, and keeps its verdict when the roots and keyed
// values matched. A gate is made right after its entry's compile, on the state the compile
// guarded: its first verdict is a pass.
//
// `reset(dicts, roots, keyed[, tensors, tensor_check])` makes it watch what the sources read
// now (an object adopted at a root, a submodule replaced by an equal one), with no verdict
// kept; `roots_match(f_locals)` says whether the roots are in place; `release()` drops every
// reference to what is watched (a root held by a weak reference died, so the model's dicts and
// parameters are not kept alive by its cache entry).
//
// Whether a dict changed: on CPython 3.12+ one dict watcher of guardpolicy's (PyDict_AddWatcher)
// bumps a process-wide epoch on any change of any watched dict, so the check is one compare; on
// 3.11 each dict's ma_version_tag is compared with the one read at the last check (one load per
// dict). 3.14 has no ma_version_tag and keeps the watcher path.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// Adds the type WatchGate(dicts, roots, keyed, recheck[, tensors, tensor_check]) to `m`. Raises error_already_set.
void BindWatchGate(pybind11::module_& m);

}  // namespace guardpolicy::python
