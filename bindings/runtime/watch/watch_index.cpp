// watch_index.cpp: StateIndex (see watch_index.h), against the CPython API of 3.11 to 3.13.
#include "watch_index.h"

#include <cstdint>

namespace guardpolicy::python {
namespace {

size_t Hash(const PyObject* obj) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(obj) >> 4) * 0x9E3779B97F4A7C15ULL);
}

WatchState* At(PyObject* states, Py_ssize_t i) {
  return reinterpret_cast<WatchState*>(PyTuple_GET_ITEM(states, i));
}

}  // namespace

StateIndex::StateIndex(PyObject* states) {
  const Py_ssize_t n = PyTuple_GET_SIZE(states);
  size_t capacity = 4;
  while (capacity < 2 * static_cast<size_t>(n)) capacity *= 2;
  slots_.assign(capacity, {nullptr, 0});
  mask_ = capacity - 1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* roots = At(states, i)->roots;
    PyObject* first = PyTuple_GET_SIZE(roots) > 0 ? PyTuple_GET_ITEM(roots, 0) : nullptr;
    if (first != nullptr && name_ == nullptr) {
      name_ = Py_NewRef(PyTuple_GET_ITEM(first, 0));
      path_ = Py_NewRef(PyTuple_GET_ITEM(first, 1));
    }
    PyObject* object = first != nullptr ? RootReferent(PyTuple_GET_ITEM(first, 2)) : nullptr;
    // names are strings and paths tuples of strings and ints: comparing them runs no Python code
    const bool keyed = object != nullptr &&
                       PyObject_RichCompareBool(PyTuple_GET_ITEM(first, 0), name_, Py_EQ) == 1 &&
                       PyObject_RichCompareBool(PyTuple_GET_ITEM(first, 1), path_, Py_EQ) == 1;
    if (PyErr_Occurred()) PyErr_Clear();  // not comparable: asked in order
    if (!keyed) {
      rest_.push_back(i);
      continue;
    }
    size_t at = Hash(object) & mask_;
    while (slots_[at].first != nullptr) at = (at + 1) & mask_;
    slots_[at] = {object, i};
  }
}

StateIndex::~StateIndex() {
  Py_XDECREF(name_);
  Py_XDECREF(path_);
}

WatchState* StateIndex::Find(PyObject* states, PyObject* f_locals) const {
  Py_ssize_t best = PY_SSIZE_T_MAX;
  if (name_ != nullptr && PyDict_Check(f_locals)) {
    PyObject* value = PyDict_GetItemWithError(f_locals, name_);
    if (value != nullptr) value = FollowPath(value, path_);
    if (value == nullptr && PyErr_Occurred()) return nullptr;
    for (size_t at = Hash(value) & mask_; value != nullptr && slots_[at].first != nullptr;
         at = (at + 1) & mask_) {
      const Py_ssize_t i = slots_[at].second;
      if (slots_[at].first != value || i >= best) continue;  // another object, or a later state
      const int match = RootsMatch(At(states, i), f_locals);
      if (match < 0) return nullptr;
      if (match == 1) best = i;
    }
  }
  for (Py_ssize_t i : rest_) {
    if (i >= best) break;
    const int match = RootsMatch(At(states, i), f_locals);
    if (match < 0) return nullptr;
    if (match == 1) best = i;
  }
  return best == PY_SSIZE_T_MAX ? nullptr : At(states, best);
}

}  // namespace guardpolicy::python
