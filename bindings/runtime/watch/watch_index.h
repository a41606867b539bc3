// watch_index.h: which of a gate's watch states belongs to a call's roots, found without
// asking each state in turn (docs/design-notes/watch.md). A model compiled block by block
// (regional compilation) serves every block from one cache entry whose gate holds a state per
// block: a scan would cost each call a compare per block, and a model's call one per block
// squared.
//
// The states are indexed by the object at their first root (the module bound to `self`, by
// identity) when that root has the first state's local name and path; a state with no roots,
// or another first root, is asked in order. The index is built from one tuple of states and
// never changes: a gate builds a new one whenever it replaces its tuple.
#pragma once

#include <Python.h>

#include <utility>
#include <vector>

#include "watch_state.h"

namespace guardpolicy::python {

class StateIndex {
 public:
  // Indexes `states` (a tuple of WatchState, borrowed: the index must not outlive it). Holds
  // the first root's name and path (a state cleared by the collector drops its rows). Made
  // and destroyed with the GIL held.
  explicit StateIndex(PyObject* states);
  ~StateIndex();
  StateIndex(const StateIndex&) = delete;
  StateIndex& operator=(const StateIndex&) = delete;

  // The first state of `states` (the tuple indexed) whose roots are in place in `f_locals`
  // (borrowed), NULL when none is (no error set), or NULL with an error set.
  WatchState* Find(PyObject* states, PyObject* f_locals) const;

 private:
  PyObject* name_ = nullptr;  // the first state's first root: local name and path (held)
  PyObject* path_ = nullptr;
  std::vector<std::pair<PyObject*, Py_ssize_t>> slots_;  // open addressing: (root object, position)
  size_t mask_ = 0;
  std::vector<Py_ssize_t> rest_;  // the positions of the states asked in order
};

}  // namespace guardpolicy::python
