// watch_state.h: guardpolicy._core.WatchState, what one set of roots of a cache entry's
// watched guards reads (docs/design-notes/watch.md), and how a call tells that none of it
// changed.
//
// A WatchState is made by the Python side (runtime/watch/__init__.py) from a walk of the watched
// guards' sources, for one set of roots (the module bound to `self`, an object passed in
// `*args`/`**kwargs`): a second instance of the class, or a KV cache of another request, has
// a state of its own. What it holds never changes after construction; only its arming does
// (the verdict of the last check, and the dict versions or watch epoch that check saw), and
// only WatchGate's call writes it.
//
//   roots      (local name, path, weak reference or object, its type, its __dict__ or None):
//              f_locals[name][path...] must be that very object (a dead reference matches
//              nothing), of that class and with that __dict__
//   dicts      dicts whose every change is seen: each one's ma_version_tag, and on CPython
//              3.12+ first a dict watcher's epoch, which any watched dict's change moves
//              (a class stands for its own dict)
//   objects    (object, type, its __dict__ or None): `obj.__class__ = ...` and
//              `obj.__dict__ = ...` change no dict, so both are compared on every call; or
//              (class, metaclass, its __mro__): `Class.__bases__ = ...` changes no dict either
//   functions  (function, __code__, __defaults__, __kwdefaults__, cell contents): assigning
//              a function's attributes or a closure cell changes no dict, compared every call
//   keyed      (dict, key, value or WATCH_ABSENT): a dict too busy to watch whole (a module's
//              globals, which its top-level code writes), read at one key; WATCH_ABSENT says
//              the key must stay missing (a builtin that a new global would shadow)
//   orders     (dict, its keys as iterating it gave them): the iteration order of an
//              OrderedDict (of hooks, a config), which `move_to_end` changes without any event
//   lists      (list, its items): a plain list's items (identity), which no event tells of
//   held       (dict, key, object): where each object a source read was found; another object
//              there (a submodule replaced by one of its class) means the state must be built
//              anew. Compared by stale() only, when a dict changed, never on every call; a bound
//              method by its function and its `__self__` (watch_hold.cpp)
//   tensors    parameters whose metadata (`.half()`, `param.data = ...`) changes without any
//              dict changing: `tensor_check(*tensors)` (torch's TensorGuards) on every pass
//   info       whatever the Python side keeps with the state (opaque here)
//
// On construction the dicts are watched and the state is armed on their state then, with no
// verdict: the Python side builds it before it evaluates the guards, so a change made while
// they are evaluated is seen by the next call.
//
// Lifetimes: a state keeps no root alive (its roots are weak references; the gate drops the
// state when one dies), so it does not hold what holds a root by construction
// (watch_hold.cpp): a root's own __dict__ (which holds the bound methods of the root kept in
// it, `self.act = self._double`) is held by identity, borrowed from the root, and read only
// once the root is found in place with that very dict (RootsMatch); a bound method in a held
// row is held by its function and a weak reference to its `__self__`. What else it holds is
// held strongly (a submodule's dict, a hook dict, a function and its closure cells): a model
// whose submodule, hook or closure holds the model itself lives as long as the gate, which
// goes with its cache entry (runtime/watch/release.py).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

namespace guardpolicy::python {

struct WatchState {
  PyObject_HEAD
  PyObject* roots;  // the rows given, their __dict__ (last item) None: in root_dicts
  PyObject* dicts;  // the dicts watched that the state holds: all but the roots' own
  PyObject* objects;
  PyObject* functions;
  PyObject* keyed;
  PyObject* orders;
  PyObject* lists;
  // (dict or index of a root's, key, object or a method's function, None or weak __self__)
  PyObject* held;
  PyObject* tensors;
  PyObject* tensor_check;  // callable or None
  PyObject* info;
  PyObject** root_dicts;  // per root row, its __dict__ when built (borrowed) or NULL (PyMem)
  PyObject** watched;     // every dict watched, in the order given (borrowed; PyMem, n_watched)
  Py_ssize_t n_watched;
  uint64_t* versions;  // each watched dict's version when armed (PyMem, n_watched; 3.11 to 3.13)
  uint64_t epoch;      // 3.12+: the watch epoch when armed (or when its versions were last found equal)
  int verdict;         // 1 pass, 0 fail, -1 none yet
};

// What a state's dicts looked like at one moment (the arming a recheck will store).
struct WatchSnapshot {
  uint64_t epoch = 0;
  uint64_t* versions = nullptr;  // 3.11 to 3.13, PyMem; freed by ReleaseSnapshot
};

// Whether `obj` is a WatchState.
bool IsWatchState(PyObject* obj);

// WATCH_ABSENT (borrowed): the value of a keyed row whose key must stay missing.
PyObject* WatchAbsent();

// 1 when every root of `state` is in place in `f_locals`, 0 when one is not, -1 on error.
int RootsMatch(const WatchState* state, PyObject* f_locals);

// 1 when anything the state compares on every call differs from when it was armed or built (a
// dict changed, an object's class or __dict__, a function attribute, a keyed value, a dict's
// order, a list's items), else 0;
// -1 on error. On 3.12+, when no dict of the state changed but the watch epoch moved (another
// state's dict changed), the state takes the epoch (its verdict stands).
int StateChanged(WatchState* state);

// 1 when anything but the dicts' contents that is compared on every call differs from the
// state's construction (its objects, functions, keyed values, orders or list items), else 0;
// -1 on error.
int RowsMoved(const WatchState* state);

// 1 when the state must be built anew: its rows moved, or an object it holds is no longer
// where it was read (`held`); else 0; -1 on error. Asked by a recheck (`stale()`), not per call.
int StateStale(const WatchState* state);

// `tensor_check(*tensors)`: a new reference to a bool, or NULL with an exception set.
PyObject* TensorsMatch(const WatchState* state);

// Reads the dicts' state now into `snap` (0, or -1 with MemoryError set); ArmState stores it
// with `verdict` and frees it; ReleaseSnapshot frees one not stored.
int TakeSnapshot(const WatchState* state, WatchSnapshot* snap);
void ArmState(WatchState* state, WatchSnapshot* snap, int verdict);
void ReleaseSnapshot(WatchSnapshot* snap);

// The object a root row's third item refers to (borrowed): the item itself, or a weak
// reference's referent; NULL once the reference died (no error set).
PyObject* RootReferent(PyObject* held);

// The object at `path` (a tuple of keys) under `value`, through tuples (int keys) and dicts
// (borrowed); NULL when there is none (no error set), or NULL with an error set.
PyObject* FollowPath(PyObject* value, PyObject* path);

// Whether each root's weak reference (if any) still refers to a live object.
bool RootsAlive(const WatchState* state);

// How a state holds what it is given (watch_hold.cpp), each 0 or -1 with an exception set:
// HoldRoots sets `roots` and `root_dicts` from the root rows given; HoldDicts sets `dicts` and
// `watched` from the watched dicts (a tuple, after HoldRoots); HoldHeld sets `held` from the
// held rows given (after HoldRoots).
int HoldRoots(WatchState* state, PyObject* rows);
int HoldDicts(WatchState* state, PyObject* dicts);
int HoldHeld(WatchState* state, PyObject* rows);

// The dict of the held row `row` of `state` (borrowed), and whether `now` is its object (by
// identity; a bound method by its function and `__self__`).
PyObject* HeldDict(const WatchState* state, PyObject* row);
bool HeldIs(PyObject* row, PyObject* now);

// Whether each root is alive and holds the __dict__ the state was built with: what makes the
// borrowed root dicts safe to read outside a call that found the state (stale()).
bool RootDictsInPlace(const WatchState* state);

// Whether `obj`'s instance dict is `dict`, through the public API (`PyObject_GenericGetDict`,
// which makes the dict where the object has none yet, as CPython's own dict-pointer lookup
// does for a managed dict); false for an object without an instance dict (its AttributeError
// cleared). Compares identities only: nothing in the dict is read.
inline bool DictIs(PyObject* obj, PyObject* dict) {
  PyObject* now = PyObject_GenericGetDict(obj, nullptr);
  if (now == nullptr) {
    PyErr_Clear();
    return false;
  }
  Py_DECREF(now);  // compared by identity only: `obj` keeps it alive
  return now == dict;
}

// Adds the type WatchState and the sentinel WATCH_ABSENT to `m`, and (3.12+) guardpolicy's
// dict watcher. Raises error_already_set.
void BindWatchState(pybind11::module_& m);

}  // namespace guardpolicy::python
