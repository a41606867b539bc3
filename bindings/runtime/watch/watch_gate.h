// watch_gate.h: guardpolicy._core.WatchGate, the per-call check of a cache entry's watched
// guards (docs/design-notes/watch.md).
//
// A WatchGate is added to a cache entry's kept guard manager as an epilogue lambda guard (one
// per group of watched guards that share roots: runtime/watch/roots.py), so
// torch calls it with the frame locals (a dict) once the entry's kept guards have passed. It
// holds the entry's watch states (watch_state.h), one per set of roots seen: the instance the
// entry was compiled for, a second instance of its class, a KV cache adopted for a request.
//
// One state machine per state: armed (a verdict kept) -> changed (anything it holds differs,
// or no state is there for the call's roots) -> checking (`recheck`, Python) -> armed.
//
//   gate(f_locals): the first state whose roots are the call's objects (watch_index.h: found
//     by the object at the first root, not by asking each state); when it is armed and
//     nothing it holds changed, its verdict (a pass also runs its tensor check). Otherwise the
//     dicts' state is read, then `recheck(f_locals, state or None)` runs and returns
//     `(verdict, new_state, None or False)`: a new state (built, and so armed, before it
//     evaluated anything) replaces the one given, or is added, with that verdict; False drops
//     the state given (it holds objects no longer there: a failed state must not pin them);
//     None arms the state given on what was read before the recheck. A change made while the recheck runs, on
//     this or another thread, is therefore seen by the next call. Nothing is reset from inside
//     a call but by this one step after `recheck` returned.
//   gate.install(state): adds a state (the compile's) ahead of the others.
//   gate.go_hot(check, calls, with_state=False): the next `calls` calls are answered by
//     `check(f_locals)` (torch's manager of the watched guards: a group rechecked call after
//     call, runtime/watch/hot.py), with no state looked up and no recheck; `with_state`: only
//     the calls whose state passed its last check and holds what it was built of (armed with a
//     pass, not stale: its installed tensors, the compile's, are where they were read), a pass
//     then running its tensor check; `hot_calls` counts them. Any other call is answered as
//     when not hot (a state armed failing keeps its verdict until what it holds changes).
//   gate.prune(*_): drops the states whose roots died (the weak references' callback), so a
//     cache entry lets go of a dead model's dicts and parameters; a call whose roots have no
//     state is checked in full, never served on nothing.
//   gate.release(): drops its states, its recheck and its hot check, for good: its plan died
//     with its compiled object, or torch dropped its cache entry (torch._dynamo.reset()), and
//     torch's manager may outlive both (runtime/watch/release.py). A later call fails; a
//     recheck running then installs nothing, and install() and go_hot() do nothing.
//
// At most `capacity` states are kept (the oldest dropped first). `rechecks` counts the calls
// that ran `recheck`.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// The states a gate keeps by default (`capacity`): one per set of roots, so one per block of a
// model compiled block by block (82 layers of regional compilation). `_core.WATCH_STATES_PER_ENTRY`.
inline constexpr Py_ssize_t kStatesPerEntry = 128;

// Adds the types WatchState and WatchGate(recheck, capacity=128) and WATCH_STATES_PER_ENTRY to `m`.
// Raises error_already_set.
void BindWatchGate(pybind11::module_& m);

}  // namespace guardpolicy::python
