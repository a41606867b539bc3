// watch_stale.cpp: whether what a WatchState holds, besides its dicts' contents, is still what
// it was built of (StateStale, watch_state.h): the rows compared on every call because no event
// tells of their change. Against the CPython API of 3.11 to 3.13.
#include "watch_state.h"

namespace guardpolicy::python {
namespace {

// An object's class or __dict__ is not the recorded one (for a class: its metaclass or __mro__,
// which `Class.__bases__ = ...` replaces without changing any dict).
bool ObjectsMoved(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->objects); ++i) {
    PyObject* row = PyTuple_GET_ITEM(s->objects, i);
    PyObject* obj = PyTuple_GET_ITEM(row, 0);
    if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) != PyTuple_GET_ITEM(row, 1)) return true;
    PyObject* dict = PyTuple_GET_ITEM(row, 2);
    if (PyTuple_Check(dict)) {
      if (reinterpret_cast<PyTypeObject*>(obj)->tp_mro != dict) return true;
      continue;
    }
    if (dict == Py_None) continue;
    if (!DictIs(obj, dict)) return true;
  }
  return false;
}

PyObject* OrNone(PyObject* obj) { return obj != nullptr ? obj : Py_None; }

// A function's code, defaults, keyword defaults or a closure cell's contents is not the
// recorded one.
bool FunctionsMoved(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->functions); ++i) {
    PyObject* row = PyTuple_GET_ITEM(s->functions, i);
    PyObject* fn = PyTuple_GET_ITEM(row, 0);
    if (PyFunction_GET_CODE(fn) != PyTuple_GET_ITEM(row, 1) ||
        OrNone(PyFunction_GET_DEFAULTS(fn)) != PyTuple_GET_ITEM(row, 2) ||
        OrNone(PyFunction_GET_KW_DEFAULTS(fn)) != PyTuple_GET_ITEM(row, 3))
      return true;
    PyObject* closure = PyFunction_GET_CLOSURE(fn);
    PyObject* contents = PyTuple_GET_ITEM(row, 4);
    const Py_ssize_t cells = closure == nullptr ? 0 : PyTuple_GET_SIZE(closure);
    if (cells != PyTuple_GET_SIZE(contents)) return true;
    for (Py_ssize_t c = 0; c < cells; ++c)
      if (OrNone(PyCell_GET(PyTuple_GET_ITEM(closure, c))) != PyTuple_GET_ITEM(contents, c)) return true;
  }
  return false;
}

// 1 when a keyed dict holds another value at its key (or gained or lost it), 0, -1 on error.
int KeyedMoved(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->keyed); ++i) {
    PyObject* row = PyTuple_GET_ITEM(s->keyed, i);
    PyObject* now = PyDict_GetItemWithError(PyTuple_GET_ITEM(row, 0), PyTuple_GET_ITEM(row, 1));
    if (now == nullptr && PyErr_Occurred()) return -1;
    if ((now == nullptr ? WatchAbsent() : now) != PyTuple_GET_ITEM(row, 2)) return 1;
  }
  return 0;
}

// Whether a list's items are not the recorded ones (identity, in order, as many).
bool ListMoved(PyObject* list, PyObject* items) {
  const Py_ssize_t n = PyList_GET_SIZE(list);
  if (n != PyTuple_GET_SIZE(items)) return true;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (PyList_GET_ITEM(list, i) != PyTuple_GET_ITEM(items, i)) return true;
  return false;
}

// 1 when what iterating an OrderedDict gives is not the recorded keys (identity, in order), 0,
// -1 on error.
int OrdersMoved(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->orders); ++i) {
    PyObject* row = PyTuple_GET_ITEM(s->orders, i);
    PyObject* keys = PyTuple_GET_ITEM(row, 1);
    PyObject* it = PyObject_GetIter(PyTuple_GET_ITEM(row, 0));
    if (it == nullptr) return -1;
    int moved = 0;
    Py_ssize_t at = 0;
    for (PyObject* key; moved == 0 && (key = PyIter_Next(it)) != nullptr; ++at) {
      moved = at >= PyTuple_GET_SIZE(keys) || key != PyTuple_GET_ITEM(keys, at);
      Py_DECREF(key);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return -1;
    if (moved || at != PyTuple_GET_SIZE(keys)) return 1;
  }
  return 0;
}

bool ListsMoved(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->lists); ++i) {
    PyObject* row = PyTuple_GET_ITEM(s->lists, i);
    if (ListMoved(PyTuple_GET_ITEM(row, 0), PyTuple_GET_ITEM(row, 1))) return true;
  }
  return false;
}

// 1 when a held row's dict holds another object at its key (or none), 0, -1 on error.
int HeldMoved(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->held); ++i) {
    PyObject* row = PyTuple_GET_ITEM(s->held, i);
    PyObject* now = PyDict_GetItemWithError(HeldDict(s, row), PyTuple_GET_ITEM(row, 1));
    if (now == nullptr && PyErr_Occurred()) return -1;
    if (!HeldIs(row, now)) return 1;
  }
  return 0;
}

}  // namespace

int RowsMoved(const WatchState* s) {
  if (ObjectsMoved(s) || FunctionsMoved(s) || ListsMoved(s)) return 1;
  const int keyed = KeyedMoved(s);
  if (keyed != 0) return keyed;
  return OrdersMoved(s);
}

int StateStale(const WatchState* s) {
  const int moved = RowsMoved(s);
  return moved != 0 ? moved : HeldMoved(s);
}

}  // namespace guardpolicy::python
