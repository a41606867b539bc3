// watch_hold.cpp: how a WatchState holds the rows it is given (watch_state.h, "Lifetimes"): a
// root's own __dict__ by identity, borrowed from the root, and a bound method in a held row by
// its function and a weak reference to its `__self__`, so that a model keeping one of its own
// bound methods (`self.act = self._double`) is not kept alive by its states. Against the
// CPython API of 3.11 to 3.13.
#include "watch_state.h"

namespace guardpolicy::python {
namespace {

// The index of `dict` among the roots' own dicts, or -1.
Py_ssize_t RootDictIndex(const WatchState* s, PyObject* dict) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->roots); ++i)
    if (s->root_dicts[i] == dict) return i;
  return -1;
}

// A held row as kept: (dict or the index of a root's, key, object or function, None or a weak
// reference to the method's __self__). A new reference, or NULL with an exception set.
PyObject* HeldRow(const WatchState* s, PyObject* given) {
  PyObject* dict = PyTuple_GET_ITEM(given, 0);
  PyObject* key = PyTuple_GET_ITEM(given, 1);
  PyObject* value = PyTuple_GET_ITEM(given, 2);
  const Py_ssize_t root = RootDictIndex(s, dict);
  PyObject* where = root >= 0 ? PyLong_FromSsize_t(root) : Py_NewRef(dict);
  if (where == nullptr) return nullptr;
  PyObject* self_ref = nullptr;
  if (PyMethod_Check(value)) {
    self_ref = PyWeakref_NewRef(PyMethod_GET_SELF(value), nullptr);
    if (self_ref == nullptr)
      PyErr_Clear();  // no weak reference to it: the method is held as it is
    else
      value = PyMethod_GET_FUNCTION(value);
  }
  PyObject* row = PyTuple_Pack(4, where, key, value, self_ref != nullptr ? self_ref : Py_None);
  Py_DECREF(where);
  Py_XDECREF(self_ref);
  return row;
}

}  // namespace

int HoldRoots(WatchState* s, PyObject* rows) {
  const Py_ssize_t n = PyTuple_GET_SIZE(rows);
  s->root_dicts =
      static_cast<PyObject**>(PyMem_Calloc(static_cast<size_t>(n > 0 ? n : 1), sizeof(PyObject*)));
  PyObject* kept = PyTuple_New(n);
  if (s->root_dicts == nullptr || kept == nullptr) {
    Py_XDECREF(kept);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* row = PyTuple_GET_ITEM(rows, i);
    PyObject* dict = PyTuple_GET_ITEM(row, 4);
    s->root_dicts[i] = dict == Py_None ? nullptr : dict;
    PyObject* held = PyTuple_Pack(5, PyTuple_GET_ITEM(row, 0), PyTuple_GET_ITEM(row, 1),
                                  PyTuple_GET_ITEM(row, 2), PyTuple_GET_ITEM(row, 3), Py_None);
    if (held == nullptr) {
      Py_DECREF(kept);
      return -1;
    }
    PyTuple_SET_ITEM(kept, i, held);
  }
  s->roots = kept;
  return 0;
}

int HoldDicts(WatchState* s, PyObject* dicts) {
  const Py_ssize_t n = PyTuple_GET_SIZE(dicts);
  s->watched =
      static_cast<PyObject**>(PyMem_Calloc(static_cast<size_t>(n > 0 ? n : 1), sizeof(PyObject*)));
  PyObject* owned = PyList_New(0);
  if (s->watched == nullptr || owned == nullptr) {
    Py_XDECREF(owned);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* dict = PyTuple_GET_ITEM(dicts, i);
    if (RootDictIndex(s, dict) < 0 && PyList_Append(owned, dict) < 0) {
      Py_DECREF(owned);
      return -1;
    }
    s->watched[i] = dict;  // a root's: borrowed; any other: held by `dicts`
  }
  s->dicts = PyList_AsTuple(owned);
  Py_DECREF(owned);
  if (s->dicts == nullptr) return -1;
  s->n_watched = n;
  return 0;
}

int HoldHeld(WatchState* s, PyObject* rows) {
  const Py_ssize_t n = PyTuple_GET_SIZE(rows);
  PyObject* kept = PyTuple_New(n);
  if (kept == nullptr) return -1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* row = HeldRow(s, PyTuple_GET_ITEM(rows, i));
    if (row == nullptr) {
      Py_DECREF(kept);
      return -1;
    }
    PyTuple_SET_ITEM(kept, i, row);
  }
  s->held = kept;
  return 0;
}

PyObject* HeldDict(const WatchState* s, PyObject* row) {
  PyObject* where = PyTuple_GET_ITEM(row, 0);
  return PyLong_CheckExact(where) ? s->root_dicts[PyLong_AsSsize_t(where)] : where;
}

bool HeldIs(PyObject* row, PyObject* now) {
  PyObject* self_ref = PyTuple_GET_ITEM(row, 3);
  if (self_ref == Py_None) return now == PyTuple_GET_ITEM(row, 2);
  PyObject* self = RootReferent(self_ref);  // NULL once it died: another object now
  return now != nullptr && PyMethod_Check(now) &&
         PyMethod_GET_FUNCTION(now) == PyTuple_GET_ITEM(row, 2) && self != nullptr &&
         PyMethod_GET_SELF(now) == self;
}

bool RootDictsInPlace(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->roots); ++i) {
    if (s->root_dicts[i] == nullptr) continue;
    PyObject* root = RootReferent(PyTuple_GET_ITEM(PyTuple_GET_ITEM(s->roots, i), 2));
    if (root == nullptr || !DictIs(root, s->root_dicts[i])) return false;
  }
  return true;
}

}  // namespace guardpolicy::python
