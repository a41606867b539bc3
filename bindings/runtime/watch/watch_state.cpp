// watch_state.cpp: the WatchState type (see watch_state.h), against the CPython API of 3.11
// to 3.13.
#include "watch_state.h"

#include "../py_type.h"

namespace guardpolicy::python {
namespace {

PyObject* absent = nullptr;  // WATCH_ABSENT: a keyed entry whose key must stay missing (WatchAbsent)

#if PY_VERSION_HEX >= 0x030C0000
int watcher_id = -1;
uint64_t watch_epoch = 0;  // bumped under the GIL by any change of any watched dict

int OnDictEvent(PyDict_WatchEvent, PyObject*, PyObject*, PyObject*) {
  ++watch_epoch;
  return 0;
}
#endif

// Dict versions: every change of a dict gives it a new `ma_version_tag` on CPython 3.11 to 3.13
// (3.12 and 3.13 keep the field, deprecated, with the dict's watcher bits, 8, and on 3.13 its
// mutation counter bits, 4, below the version: masked off, as watching a dict sets them). On
// 3.13 an instance's dict that shares its inline values sees neither a version nor an event on
// `obj.x = v`: the Python side watches only dicts of their own (runtime/watch/own_dicts.py).
#if PY_VERSION_HEX < 0x030E0000
#define GUARDPOLICY_DICT_VERSIONS 1
#if PY_VERSION_HEX >= 0x030D0000
constexpr uint64_t kVersionMask = ~((uint64_t{1} << 12) - 1);
#elif PY_VERSION_HEX >= 0x030C0000
constexpr uint64_t kVersionMask = ~((uint64_t{1} << 8) - 1);
#else
constexpr uint64_t kVersionMask = ~uint64_t{0};
#endif

uint64_t VersionOf(PyObject* dict) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag & kVersionMask;
#pragma GCC diagnostic pop
}
#endif

// Whether a dict of the state changed since it was armed. On 3.12+ one compare when no watched
// dict changed anywhere (the epoch); when one did, the state's own dicts' versions decide, and
// the state takes the epoch when none of them changed: a dict another state watches, written
// on every call (another model's, a KV cache's), does not make this state be checked again.
bool DictsChanged(WatchState* s) {
#if PY_VERSION_HEX >= 0x030C0000
  if (s->epoch == watch_epoch) return false;
#endif
#ifdef GUARDPOLICY_DICT_VERSIONS
  for (Py_ssize_t i = 0; i < s->n_watched; ++i)
    if (VersionOf(s->watched[i]) != s->versions[i]) return true;
#if PY_VERSION_HEX >= 0x030C0000
  s->epoch = watch_epoch;
#endif
  return false;
#else
  return true;  // no versions: the epoch alone
#endif
}

PyObject* New(PyTypeObject* type, PyObject* args, PyObject* kwargs);

// Checks the row shapes the per-call checks rely on; 0, or -1 with a TypeError set.
int CheckRows(PyObject* rows, Py_ssize_t width, bool (*ok)(PyObject* row), const char* what) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(rows); ++i) {
    PyObject* row = PyTuple_GET_ITEM(rows, i);
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != width || !ok(row)) {
      PyErr_Format(PyExc_TypeError, "WatchState %s rows are malformed (row %zd)", what, i);
      return -1;
    }
  }
  return 0;
}

bool RootOk(PyObject* r) {
  return PyUnicode_Check(PyTuple_GET_ITEM(r, 0)) && PyTuple_Check(PyTuple_GET_ITEM(r, 1)) &&
         PyType_Check(PyTuple_GET_ITEM(r, 3)) && (PyTuple_GET_ITEM(r, 4) == Py_None || PyDict_Check(PyTuple_GET_ITEM(r, 4)));
}
bool ObjectOk(PyObject* r) {
  PyObject* third = PyTuple_GET_ITEM(r, 2);
  return PyType_Check(PyTuple_GET_ITEM(r, 1)) &&
         (third == Py_None || PyDict_Check(third) || (PyTuple_Check(third) && PyType_Check(PyTuple_GET_ITEM(r, 0))));
}
bool FunctionOk(PyObject* r) { return PyFunction_Check(PyTuple_GET_ITEM(r, 0)) && PyTuple_Check(PyTuple_GET_ITEM(r, 4)); }
bool KeyedOk(PyObject* r) { return PyDict_Check(PyTuple_GET_ITEM(r, 0)); }
bool OrderOk(PyObject* r) { return PyTuple_Check(PyTuple_GET_ITEM(r, 1)); }
bool ListOk(PyObject* r) { return PyList_CheckExact(PyTuple_GET_ITEM(r, 0)) && PyTuple_Check(PyTuple_GET_ITEM(r, 1)); }
bool AnyOk(PyObject*) { return true; }

// The tuple fields of a WatchState, named once: the keyword each is given by, the width of its
// rows and their check (width 0: a plain tuple, not rows). `dicts` is given as dicts and
// classes and kept as the dicts they stand for (WatchedDicts); `roots`, `dicts` and `held` are
// kept as watch_hold.cpp holds them.
struct RowField {
  const char* name;
  PyObject* WatchState::*field;
  Py_ssize_t width;
  bool (*ok)(PyObject* row);
};
constexpr RowField kRowFields[] = {
    {"roots", &WatchState::roots, 5, RootOk},      {"dicts", &WatchState::dicts, 0, AnyOk},
    {"objects", &WatchState::objects, 3, ObjectOk}, {"functions", &WatchState::functions, 5, FunctionOk},
    {"keyed", &WatchState::keyed, 3, KeyedOk},     {"orders", &WatchState::orders, 2, OrderOk},
    {"lists", &WatchState::lists, 2, ListOk},      {"held", &WatchState::held, 3, KeyedOk},
    {"tensors", &WatchState::tensors, 0, AnyOk},
};
constexpr size_t kRowCount = sizeof(kRowFields) / sizeof(*kRowFields);
// The fields New() holds through watch_hold.cpp.
constexpr size_t kRoots = 0, kDicts = 1, kHeld = 7;
static_assert(kRowFields[kRoots].field == &WatchState::roots &&
                  kRowFields[kDicts].field == &WatchState::dicts &&
                  kRowFields[kHeld].field == &WatchState::held,
              "New() reads the roots, dicts and held rows given at kRoots, kDicts and kHeld");

// The dicts `given` (dicts and classes) stand for, as a new tuple, each watched (3.12+); a
// static class cannot change and stands for nothing. NULL with an exception set.
PyObject* WatchedDicts(PyObject* given) {
  PyObject* dicts = PyList_New(0);
  if (dicts == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(given); ++i) {
    PyObject* obj = PyTuple_GET_ITEM(given, i);
    PyObject* dict = obj;
    if (PyType_Check(obj)) {
      auto* type = reinterpret_cast<PyTypeObject*>(obj);
      const bool fixed = !(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_flags & Py_TPFLAGS_IMMUTABLETYPE;
      dict = fixed || type->tp_dict == nullptr ? nullptr : type->tp_dict;
      if (dict == nullptr) continue;
    } else if (!PyDict_Check(obj)) {
      PyErr_Format(PyExc_TypeError, "WatchState watches dicts and classes, not %.100s", Py_TYPE(obj)->tp_name);
      Py_DECREF(dicts);
      return nullptr;
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (PyDict_Watch(watcher_id, dict) < 0) {
      Py_DECREF(dicts);
      return nullptr;
    }
#endif
    if (PyList_Append(dicts, dict) < 0) {
      Py_DECREF(dicts);
      return nullptr;
    }
  }
  PyObject* out = PyList_AsTuple(dicts);
  Py_DECREF(dicts);
  return out;
}

int Traverse(PyObject* self_, visitproc visit, void* arg) {
  auto* s = reinterpret_cast<WatchState*>(self_);
  for (const RowField& row : kRowFields) Py_VISIT(s->*row.field);
  Py_VISIT(s->tensor_check);
  Py_VISIT(s->info);
  return 0;
}

// Drops what the state references but the empty tuples its per-call checks walk (a cleared
// state, in a cycle the collector breaks, may still be asked by a call in flight).
int Clear(PyObject* self_) {
  auto* s = reinterpret_cast<WatchState*>(self_);
  for (const RowField& row : kRowFields) {
    PyObject* empty = PyTuple_New(0);
    Py_XSETREF(s->*row.field, empty);
  }
  s->n_watched = 0;
  s->verdict = -1;
  Py_CLEAR(s->tensor_check);
  Py_CLEAR(s->info);
  return 0;
}

void Dealloc(PyObject* self_) {
  PyObject_GC_UnTrack(self_);
  auto* s = reinterpret_cast<WatchState*>(self_);
  for (const RowField& row : kRowFields) Py_CLEAR(s->*row.field);
  Py_CLEAR(s->tensor_check);
  Py_CLEAR(s->info);
  PyMem_Free(s->versions);
  PyMem_Free(s->root_dicts);
  PyMem_Free(s->watched);
  Py_TYPE(self_)->tp_free(self_);
}

PyObject* Stale(PyObject* self_, PyObject*) {
  auto* s = reinterpret_cast<WatchState*>(self_);
  // a root died or its __dict__ was replaced: that dict is not read
  if (!RootDictsInPlace(s)) Py_RETURN_TRUE;
  const int stale = StateStale(s);
  return stale < 0 ? nullptr : PyBool_FromLong(stale);
}

PyMethodDef methods[] = {
    {"stale", Stale, METH_NOARGS,
     "stale(): whether the state must be built anew: a root's __dict__, an object's class or "
     "__dict__, a function attribute, a keyed value, a dict's order, a list's items or an "
     "object where it was read differ from the state's construction"},
    {nullptr, nullptr, 0, nullptr},
};

PyObject* GetVerdict(PyObject* self_, void*) {
  const int verdict = reinterpret_cast<WatchState*>(self_)->verdict;
  if (verdict < 0) Py_RETURN_NONE;
  return PyBool_FromLong(verdict);
}

PyObject* GetWatched(PyObject* self_, void*) {
  return PyLong_FromSsize_t(reinterpret_cast<WatchState*>(self_)->n_watched);
}

PyObject* GetInfo(PyObject* self_, void*) {
  PyObject* info = reinterpret_cast<WatchState*>(self_)->info;
  if (info == nullptr) info = Py_None;
  Py_INCREF(info);
  return info;
}

PyGetSetDef getset[] = {
    {const_cast<char*>("verdict"), GetVerdict, nullptr,
     const_cast<char*>("the verdict kept since the last check (None before the first)"), nullptr},
    {const_cast<char*>("watched"), GetWatched, nullptr, const_cast<char*>("how many dicts are watched"), nullptr},
    {const_cast<char*>("info"), GetInfo, nullptr, const_cast<char*>("what the Python side keeps with it"), nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject state_type = [] {
  PyTypeObject t = GcType("guardpolicy._core.WatchState", sizeof(WatchState), 0,
                          "WatchState(*, roots, dicts, objects, functions, keyed, orders, lists, held, tensors, "
                          "tensor_check, info): "
                          "what one set of roots of a cache entry's watched guards reads (watch_state.h)",
                          Traverse, Clear, Dealloc);
  t.tp_new = New;
  t.tp_methods = methods;
  t.tp_getset = getset;
  return t;
}();

// Reads the keyword `name` of `kwargs` (borrowed), or sets a TypeError naming it.
PyObject* Keyword(PyObject* kwargs, const char* name) {
  PyObject* value = kwargs == nullptr ? nullptr : PyDict_GetItemString(kwargs, name);
  if (value == nullptr) PyErr_Format(PyExc_TypeError, "WatchState() needs the keyword argument `%s`", name);
  return value;
}

PyObject* New(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if (PyTuple_GET_SIZE(args) != 0 || kwargs == nullptr || PyDict_GET_SIZE(kwargs) != Py_ssize_t{kRowCount} + 2) {
    PyErr_SetString(PyExc_TypeError, "WatchState() takes keyword arguments only: roots, dicts, objects, functions, "
                                     "keyed, orders, lists, held, tensors, tensor_check, info");
    return nullptr;
  }
  PyObject* given[kRowCount];
  for (size_t i = 0; i < kRowCount; ++i) {
    const RowField& row = kRowFields[i];
    given[i] = Keyword(kwargs, row.name);
    if (given[i] == nullptr) return nullptr;
    if (!PyTuple_Check(given[i])) return PyErr_Format(PyExc_TypeError, "WatchState `%s` must be a tuple", row.name);
    if (row.width > 0 && CheckRows(given[i], row.width, row.ok, row.name) < 0) return nullptr;
  }
  PyObject* check = Keyword(kwargs, "tensor_check");
  PyObject* info = Keyword(kwargs, "info");
  if (check == nullptr || info == nullptr) return nullptr;
  PyObject* dicts = WatchedDicts(given[kDicts]);
  if (dicts == nullptr) return nullptr;
  auto* s = reinterpret_cast<WatchState*>(type->tp_alloc(type, 0));
  if (s == nullptr) {
    Py_DECREF(dicts);
    return nullptr;
  }
  for (size_t i = 0; i < kRowCount; ++i)
    if (i != kRoots && i != kDicts && i != kHeld) s->*kRowFields[i].field = Py_NewRef(given[i]);
  s->tensor_check = Py_NewRef(check);
  s->info = Py_NewRef(info);
  const int held = HoldRoots(s, given[kRoots]) < 0 || HoldDicts(s, dicts) < 0 ||
                           HoldHeld(s, given[kHeld]) < 0
                       ? -1
                       : 0;
  Py_DECREF(dicts);
  WatchSnapshot snap;
  if (held < 0 || TakeSnapshot(s, &snap) < 0) {
    Py_DECREF(s);
    return nullptr;
  }
  ArmState(s, &snap, -1);
  return reinterpret_cast<PyObject*>(s);
}

}  // namespace

PyObject* RootReferent(PyObject* held) {
  if (!PyWeakref_CheckRef(held)) return held;
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* obj = nullptr;
  if (PyWeakref_GetRef(held, &obj) <= 0) {
    PyErr_Clear();
    return nullptr;
  }
  Py_DECREF(obj);  // alive: the weak reference's referent outlives this borrowed use
  return obj;
#else
  PyObject* obj = PyWeakref_GET_OBJECT(held);
  return obj == Py_None ? nullptr : obj;
#endif
}

PyObject* FollowPath(PyObject* value, PyObject* path) {
  for (Py_ssize_t i = 0; value != nullptr && i < PyTuple_GET_SIZE(path); ++i) {
    PyObject* key = PyTuple_GET_ITEM(path, i);
    if (PyTuple_Check(value) && PyLong_Check(key)) {
      const Py_ssize_t at = PyLong_AsSsize_t(key);
      if (at == -1 && PyErr_Occurred()) return nullptr;
      value = at >= 0 && at < PyTuple_GET_SIZE(value) ? PyTuple_GET_ITEM(value, at) : nullptr;
    } else if (PyDict_Check(value)) {
      value = PyDict_GetItemWithError(value, key);
    } else {
      value = nullptr;
    }
  }
  return value;
}

bool IsWatchState(PyObject* obj) { return Py_TYPE(obj) == &state_type; }

PyObject* WatchAbsent() { return absent; }

int RootsMatch(const WatchState* s, PyObject* f_locals) {
  if (!PyDict_Check(f_locals)) return PyTuple_GET_SIZE(s->roots) == 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->roots); ++i) {
    PyObject* root = PyTuple_GET_ITEM(s->roots, i);
    PyObject* value = PyDict_GetItemWithError(f_locals, PyTuple_GET_ITEM(root, 0));
    if (value != nullptr) value = FollowPath(value, PyTuple_GET_ITEM(root, 1));
    if (value == nullptr && PyErr_Occurred()) return -1;
    PyObject* expected = RootReferent(PyTuple_GET_ITEM(root, 2));
    if (expected == nullptr || value != expected) return 0;
    if (reinterpret_cast<PyObject*>(Py_TYPE(value)) != PyTuple_GET_ITEM(root, 3)) return 0;  // __class__ =
    PyObject* dict = s->root_dicts[i];  // borrowed: compared, never read, until found in place
    if (dict != nullptr && !DictIs(value, dict)) return 0;  // __dict__ =
  }
  return 1;
}

bool RootsAlive(const WatchState* s) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->roots); ++i)
    if (RootReferent(PyTuple_GET_ITEM(PyTuple_GET_ITEM(s->roots, i), 2)) == nullptr) return false;
  return true;
}

int StateChanged(WatchState* s) { return DictsChanged(s) ? 1 : RowsMoved(s); }

PyObject* TensorsMatch(const WatchState* s) {
  const Py_ssize_t n = PyTuple_GET_SIZE(s->tensors);
  if (n == 0 || s->tensor_check == nullptr || s->tensor_check == Py_None) Py_RETURN_TRUE;
  return PyObject_Vectorcall(s->tensor_check, &PyTuple_GET_ITEM(s->tensors, 0), static_cast<size_t>(n), nullptr);
}

int TakeSnapshot(const WatchState* s, WatchSnapshot* snap) {
#if PY_VERSION_HEX >= 0x030C0000
  snap->epoch = watch_epoch;
#endif
#ifdef GUARDPOLICY_DICT_VERSIONS
  const Py_ssize_t n = s->n_watched;
  snap->versions = static_cast<uint64_t*>(PyMem_Malloc(sizeof(uint64_t) * static_cast<size_t>(n > 0 ? n : 1)));
  if (snap->versions == nullptr) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) snap->versions[i] = VersionOf(s->watched[i]);
#else
  (void)s;
#endif
  return 0;
}

void ArmState(WatchState* s, WatchSnapshot* snap, int verdict) {
  s->epoch = snap->epoch;
  PyMem_Free(s->versions);
  s->versions = snap->versions;  // the same dicts (a state's dicts never change): the same length
  snap->versions = nullptr;
  s->verdict = verdict;
}

void ReleaseSnapshot(WatchSnapshot* snap) {
  PyMem_Free(snap->versions);
  snap->versions = nullptr;
}

namespace {

// watch_version(obj): see its docstring below. Raises pybind11::type_error for another object.
pybind11::object WatchVersion(pybind11::handle obj) {
  PyObject* dict = obj.ptr();
  if (PyType_Check(dict)) {
    auto* type = reinterpret_cast<PyTypeObject*>(dict);
    // a static or immutable class cannot change (on 3.12+ a static builtin type has no tp_dict)
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_flags & Py_TPFLAGS_IMMUTABLETYPE) return pybind11::int_(0);
    dict = type->tp_dict;
  }
  if (dict == nullptr || !PyDict_Check(dict)) throw pybind11::type_error("watch_version takes a dict or a class");
#ifdef GUARDPOLICY_DICT_VERSIONS
  return pybind11::int_(VersionOf(dict));
#else
  return pybind11::none();
#endif
}

}  // namespace

void BindWatchState(pybind11::module_& m) {
#if PY_VERSION_HEX >= 0x030C0000
  if (watcher_id < 0) {
    watcher_id = PyDict_AddWatcher(OnDictEvent);
    if (watcher_id < 0) throw pybind11::error_already_set();
  }
#endif
  if (absent == nullptr) {
    absent = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
    if (absent == nullptr) throw pybind11::error_already_set();
  }
  Py_INCREF(absent);
  m.add_object("WATCH_ABSENT", absent);
  AddType(m, "WatchState", &state_type);
  m.def("watch_version", &WatchVersion, pybind11::arg("obj"),
        "watch_version(obj): the version of a dict, or of a class's own dict (ma_version_tag, the "
        "watcher bits masked), which every change of it moves; 0 for a static or immutable class, "
        "which cannot change; None where this Python keeps none (3.14+)");
  m.def(
      "watch_versions",
      [](const pybind11::tuple& objs) -> pybind11::object {
        pybind11::tuple out(objs.size());
        for (size_t i = 0; i < objs.size(); ++i) {
          pybind11::object version = WatchVersion(objs[i]);
          if (version.is_none()) return version;
          out[i] = std::move(version);
        }
        return std::move(out);
      },
      pybind11::arg("objs"),
      "watch_versions(objs): watch_version of each of a tuple of dicts and classes, as a tuple, in one "
      "call (the watch's signature key, read on every recheck); None where this Python keeps none");
}

}  // namespace guardpolicy::python
