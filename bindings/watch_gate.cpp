// watch_gate.cpp: the WatchGate type (see watch_gate.h), against the CPython API of 3.11 to 3.13.
#include "watch_gate.h"

#include <cstdint>
#include <vector>

namespace guardpolicy::python {
namespace {

struct WatchGate {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* recheck;  // recheck(f_locals) -> bool: the watched guards, evaluated
  PyObject* held;     // a tuple: the objects given (dicts and classes), kept alive
  PyObject* dicts;    // a tuple: the dicts watched (a class's own dict stands for the class)
  PyObject* roots;    // a tuple of (local name, path, object or a weak reference to it):
                      // f_locals[name][path[0]]... (through `*args`, `**kwargs`) is the object
  PyObject* keyed;    // a tuple of (dict, key, value) triples: read by key, not watched whole; a
                      // triple (object or a weak reference to it, None, dict) says that dict
                      // is the object's __dict__ (assigning `obj.__dict__` changes no dict)
  PyObject* tensors;  // a tuple of tensors (parameters) whose metadata is checked on every call
  PyObject* tensor_check;  // tensor_check(*tensors) -> bool (torch's TensorGuards.check), or None
  std::vector<uint64_t>* versions;  // 3.11: ma_version_tag of each dict at the last check
  uint64_t epoch;                   // 3.12+: the watch epoch at the last check
  PyObject* frozen;   // a tuple: the dicts compared whole on a change (hook dicts, classes' dicts)
  std::vector<uint64_t>* frozen_versions;  // 3.11: their ma_version_tag at the last check
  uint64_t frozen_epoch;                   // 3.12+: the frozen epoch at the last check
  int verdict;                      // the last check's verdict: 1 pass, 0 fail, -1 none yet
  long long rechecks;               // how many calls evaluated the watched guards
};

#if PY_VERSION_HEX >= 0x030C0000
int watcher_id = -1;
uint64_t watch_epoch = 0;  // bumped under the GIL by any change of any watched dict

int OnDictEvent(PyDict_WatchEvent, PyObject*, PyObject*, PyObject*) {
  ++watch_epoch;
  return 0;
}

int frozen_watcher_id = -1;
uint64_t frozen_watch_epoch = 0;  // bumped by any change of a frozen dict (a second watcher)

int OnFrozenEvent(PyDict_WatchEvent, PyObject*, PyObject*, PyObject*) {
  ++frozen_watch_epoch;
  return 0;
}
#endif

// The address of the object the weak reference `ref` refers to, None once it died (compared
// by address only: no reference is kept).
PyObject* Referent(PyObject* ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* obj = nullptr;
  if (PyWeakref_GetRef(ref, &obj) < 0) {
    PyErr_Clear();
    return Py_None;
  }
  if (obj == nullptr) return Py_None;
  Py_DECREF(obj);
  return obj;
#else
  return PyWeakref_GET_OBJECT(ref);
#endif
}

// Whether `owner` (or the object the weak reference refers to) has another __dict__ than `dict`.
bool OwnDictChanged(PyObject* owner, PyObject* dict) {
  if (PyWeakref_CheckRef(owner)) owner = Referent(owner);
  if (owner == Py_None) return true;  // died: its guards are checked again
  PyObject** slot = _PyObject_GetDictPtr(owner);
  return slot == nullptr || *slot != dict;
}

// Whether a keyed dict holds another value at its key (or lost it), or an object another
// __dict__: 1, 0, or -1 on error.
int KeyChanged(const WatchGate* self) {
  const Py_ssize_t n = PyTuple_GET_SIZE(self->keyed);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* triple = PyTuple_GET_ITEM(self->keyed, i);
    PyObject* key = PyTuple_GET_ITEM(triple, 1);
    if (key == Py_None) {
      if (OwnDictChanged(PyTuple_GET_ITEM(triple, 0), PyTuple_GET_ITEM(triple, 2))) return 1;
      continue;
    }
    PyObject* now = PyDict_GetItemWithError(PyTuple_GET_ITEM(triple, 0), key);
    if (now == nullptr && PyErr_Occurred()) return -1;
    if (now != PyTuple_GET_ITEM(triple, 2)) return 1;
  }
  return 0;
}

// Whether a watched dict changed since the last check.
bool Changed(const WatchGate* self) {
#if PY_VERSION_HEX >= 0x030C0000
  return self->epoch != watch_epoch;
#else
  const Py_ssize_t n = PyTuple_GET_SIZE(self->dicts);
  const uint64_t* versions = self->versions->data();
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (reinterpret_cast<PyDictObject*>(PyTuple_GET_ITEM(self->dicts, i))->ma_version_tag != versions[i]) return true;
  }
  return false;
#endif
}

#if PY_VERSION_HEX >= 0x030C0000
#define WATCHER(id) (id)
#else
#define WATCHER(id) (-1)
#endif

// Whether a frozen dict changed since the last check (or none was frozen yet: then false).
bool FrozenChanged(const WatchGate* self) {
  if (self->frozen == nullptr) return false;
#if PY_VERSION_HEX >= 0x030C0000
  return self->frozen_epoch != frozen_watch_epoch;
#else
  const Py_ssize_t n = PyTuple_GET_SIZE(self->frozen);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (reinterpret_cast<PyDictObject*>(PyTuple_GET_ITEM(self->frozen, i))->ma_version_tag !=
        (*self->frozen_versions)[static_cast<size_t>(i)])
      return true;
  }
  return false;
#endif
}

// Records the frozen dicts' state now.
void ArmFrozen(WatchGate* self) {
  if (self->frozen == nullptr) return;
#if PY_VERSION_HEX >= 0x030C0000
  self->frozen_epoch = frozen_watch_epoch;
#else
  const Py_ssize_t n = PyTuple_GET_SIZE(self->frozen);
  self->frozen_versions->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    (*self->frozen_versions)[static_cast<size_t>(i)] =
        reinterpret_cast<PyDictObject*>(PyTuple_GET_ITEM(self->frozen, i))->ma_version_tag;
#endif
}

// Records the state the next Changed() compares with.
void Arm(WatchGate* self, uint64_t epoch, const std::vector<uint64_t>& versions) {
#if PY_VERSION_HEX >= 0x030C0000
  self->epoch = epoch;
  (void)versions;
#else
  (void)epoch;
  *self->versions = versions;
#endif
}

// The state now: (epoch, versions), read before a recheck so that a change made while it runs
// is seen by the next call.
void Read(const WatchGate* self, uint64_t* epoch, std::vector<uint64_t>* versions) {
#if PY_VERSION_HEX >= 0x030C0000
  *epoch = watch_epoch;
  (void)self;
  (void)versions;
#else
  *epoch = 0;
  const Py_ssize_t n = PyTuple_GET_SIZE(self->dicts);
  versions->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    (*versions)[static_cast<size_t>(i)] = reinterpret_cast<PyDictObject*>(PyTuple_GET_ITEM(self->dicts, i))->ma_version_tag;
#endif
}

// The object at `path` (a tuple of keys) under `value`, through tuples (int keys) and dicts;
// NULL when there is none (no error set), or NULL with an error set.
PyObject* Follow(PyObject* value, PyObject* path) {
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

// 1 when every root of `f_locals` is the recorded object, 0 when one is not, -1 on error.
int RootsMatch(const WatchGate* self, PyObject* f_locals) {
  const Py_ssize_t n = PyTuple_GET_SIZE(self->roots);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* root = PyTuple_GET_ITEM(self->roots, i);
    PyObject* value = PyDict_Check(f_locals) ? PyDict_GetItemWithError(f_locals, PyTuple_GET_ITEM(root, 0)) : nullptr;
    if (value != nullptr) value = Follow(value, PyTuple_GET_ITEM(root, 1));
    if (value == nullptr && PyErr_Occurred()) return -1;
    PyObject* expected = PyTuple_GET_ITEM(root, 2);
    if (PyWeakref_CheckRef(expected)) expected = Referent(expected);
    if (value != expected) return 0;
  }
  return 1;
}

// tensor_check(*tensors): whether the watched parameters still have their compile's dtype,
// device, shape, strides and dispatch keys (`.half()`, `param.data = other`,
// `channels_last` change them without changing any dict). A new reference to a bool.
PyObject* TensorsMatch(const WatchGate* self) {
  const Py_ssize_t n = PyTuple_GET_SIZE(self->tensors);
  if (n == 0 || self->tensor_check == Py_None) Py_RETURN_TRUE;
  return PyObject_Vectorcall(self->tensor_check, &PyTuple_GET_ITEM(self->tensors, 0), static_cast<size_t>(n), nullptr);
}

PyObject* Call(PyObject* self_, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  if (self->recheck == nullptr) {
    PyErr_SetString(PyExc_TypeError, "WatchGate.__init__(dicts, roots, keyed, recheck[, tensors, tensor_check]) was not called");
    return nullptr;
  }
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)) {
    PyErr_SetString(PyExc_TypeError, "WatchGate takes the frame locals, one positional argument");
    return nullptr;
  }
  PyObject* f_locals = args[0];
  const int roots = RootsMatch(self, f_locals);
  if (roots < 0) return nullptr;
  const int keys = KeyChanged(self);
  if (keys < 0) return nullptr;
  const bool frozen = FrozenChanged(self);
  const bool changed = frozen || keys != 0 || self->verdict < 0 || Changed(self);
  if (roots == 1 && !changed) return self->verdict ? TensorsMatch(self) : PyBool_FromLong(0);
  uint64_t epoch;
  std::vector<uint64_t> versions;
  Read(self, &epoch, &versions);
  ++self->rechecks;
  // recheck(f_locals, changed): 0, only a root differs (the watched state is as the last check
  // left it); 1, watched state changed; 2, a frozen dict (hooks, a class) changed too
  PyObject* how = PyLong_FromLong(frozen || self->verdict < 0 ? 2 : changed ? 1 : 0);
  if (how == nullptr) return nullptr;
  PyObject* call_args[2] = {f_locals, how};
  PyObject* result = PyObject_Vectorcall(self->recheck, call_args, 2, nullptr);
  Py_DECREF(how);
  if (result == nullptr) return nullptr;
  const int truth = PyObject_IsTrue(result);
  Py_DECREF(result);
  if (truth < 0) return nullptr;
  if (roots == 1 && keys == 0) {  // another object at a root (a copy of the module), or a global
                                  // rebound (its recorded value no longer there): not kept
    self->verdict = truth;
    Arm(self, epoch, versions);
    ArmFrozen(self);  // compared whole just now: the kept verdict holds until one changes again
  }
  if (!truth) return PyBool_FromLong(0);
  // another object at a root: the recheck evaluated its parameters' guards, not the recorded ones
  return roots == 1 ? TensorsMatch(self) : PyBool_FromLong(1);
}

// The dict a watched object stands for: a dict itself, a class's own dict (None for a class
// that cannot change: a static type), anything else a TypeError.
PyObject* DictOf(PyObject* obj) {
  if (PyDict_Check(obj)) return obj;
  if (PyType_Check(obj)) {
    auto* type = reinterpret_cast<PyTypeObject*>(obj);
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_flags & Py_TPFLAGS_IMMUTABLETYPE) return Py_None;
    return type->tp_dict != nullptr && PyDict_Check(type->tp_dict) ? type->tp_dict : Py_None;
  }
  PyErr_Format(PyExc_TypeError, "WatchGate watches dicts and classes, not %.100s", Py_TYPE(obj)->tp_name);
  return nullptr;
}

PyObject* New(PyTypeObject* type, PyObject*, PyObject*) {
  auto* self = reinterpret_cast<WatchGate*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->vectorcall = Call;
  self->versions = new std::vector<uint64_t>();
  self->frozen_versions = new std::vector<uint64_t>();
  self->verdict = -1;
  return reinterpret_cast<PyObject*>(self);
}

// The dicts `given` (dicts and classes) stand for, as a new tuple, each watched by `watcher`
// (3.12+; -1 on 3.11: versions are read instead); NULL with an exception set.
PyObject* WatchedDicts(PyObject* given, int watcher) {
  PyObject* dicts = PyList_New(0);
  if (dicts == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(given); ++i) {
    PyObject* dict = DictOf(PyTuple_GET_ITEM(given, i));
    if (dict == nullptr || (dict != Py_None && PyList_Append(dicts, dict) < 0)) {
      Py_DECREF(dicts);
      return nullptr;
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (dict != Py_None && PyDict_Watch(watcher, dict) < 0) {
      Py_DECREF(dicts);
      return nullptr;
    }
#else
    (void)watcher;
#endif
  }
  PyObject* out = PyList_AsTuple(dicts);
  Py_DECREF(dicts);
  return out;
}

// Checks the shapes of `roots` and `keyed`; 0, or -1 with a TypeError set.
int CheckShapes(PyObject* roots, PyObject* keyed) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(roots); ++i) {
    PyObject* root = PyTuple_GET_ITEM(roots, i);
    if (!PyTuple_Check(root) || PyTuple_GET_SIZE(root) != 3 || !PyUnicode_Check(PyTuple_GET_ITEM(root, 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(root, 1))) {
      PyErr_SetString(PyExc_TypeError, "WatchGate roots are (local name, path tuple, object) triples");
      return -1;
    }
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keyed); ++i) {
    PyObject* triple = PyTuple_GET_ITEM(keyed, i);
    if (!PyTuple_Check(triple) || PyTuple_GET_SIZE(triple) != 3 ||
        (PyTuple_GET_ITEM(triple, 1) == Py_None ? !PyDict_Check(PyTuple_GET_ITEM(triple, 2))
                                                : !PyDict_Check(PyTuple_GET_ITEM(triple, 0)))) {
      PyErr_SetString(PyExc_TypeError,
                      "WatchGate keyed entries are (dict, key, value) or (object, None, its __dict__) triples");
      return -1;
    }
  }
  return 0;
}

// Watches what `given` stands for, with `roots` and `keyed`, armed on the state now with
// `verdict`; 0, or -1 with an exception set (the gate unchanged).
int Set(WatchGate* self, PyObject* given, PyObject* roots, PyObject* keyed, int verdict) {
  if (CheckShapes(roots, keyed) < 0) return -1;
  PyObject* watched = WatchedDicts(given, WATCHER(watcher_id));
  if (watched == nullptr) return -1;
  Py_INCREF(given);
  Py_INCREF(roots);
  Py_INCREF(keyed);
  Py_XSETREF(self->held, given);
  Py_XSETREF(self->roots, roots);
  Py_XSETREF(self->keyed, keyed);
  Py_XSETREF(self->dicts, watched);
  uint64_t epoch;
  std::vector<uint64_t> versions;
  Read(self, &epoch, &versions);
  Arm(self, epoch, versions);
  self->verdict = verdict;
  return 0;
}

int Init(PyObject* self_, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"dicts", "roots", "keyed", "recheck", "tensors", "tensor_check", nullptr};
  PyObject *given, *roots, *keyed, *recheck, *tensors = nullptr, *tensor_check = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!O|O!O:WatchGate", const_cast<char**>(keywords),
                                   &PyTuple_Type, &given, &PyTuple_Type, &roots, &PyTuple_Type, &keyed, &recheck,
                                   &PyTuple_Type, &tensors, &tensor_check))
    return -1;
  auto* self = reinterpret_cast<WatchGate*>(self_);
  if (tensors == nullptr) tensors = PyTuple_New(0);
  else Py_INCREF(tensors);
  if (tensors == nullptr) return -1;
  Py_XSETREF(self->tensors, tensors);
  Py_INCREF(tensor_check);
  Py_XSETREF(self->tensor_check, tensor_check);
  // Made right after the compile, whose guards held on this very state: a pass until it changes.
  if (Set(self, given, roots, keyed, 1) < 0) return -1;
  Py_INCREF(recheck);
  Py_XSETREF(self->recheck, recheck);
  return 0;
}

// gate.reset(dicts, roots, keyed[, tensors, tensor_check]): watches these instead (another
// object adopted at a root, or objects read anew), with no verdict: the next call checks again.
PyObject* Reset(PyObject* self_, PyObject* args) {
  PyObject *given, *roots, *keyed, *tensors = nullptr, *tensor_check = nullptr;
  if (!PyArg_ParseTuple(args, "O!O!O!|O!O:reset", &PyTuple_Type, &given, &PyTuple_Type, &roots, &PyTuple_Type, &keyed,
                        &PyTuple_Type, &tensors, &tensor_check))
    return nullptr;
  auto* self = reinterpret_cast<WatchGate*>(self_);
  if (Set(self, given, roots, keyed, -1) < 0) return nullptr;
  if (tensors != nullptr) {
    Py_INCREF(tensors);
    Py_XSETREF(self->tensors, tensors);
    PyObject* check = tensor_check != nullptr ? tensor_check : Py_None;
    Py_INCREF(check);
    Py_XSETREF(self->tensor_check, check);
  }
  Py_RETURN_NONE;
}

// gate.roots_match(f_locals): whether every root of `f_locals` is the recorded object.
PyObject* RootsMatchMethod(PyObject* self_, PyObject* f_locals) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  if (self->roots == nullptr) Py_RETURN_FALSE;
  const int match = RootsMatch(self, f_locals);
  if (match < 0) return nullptr;
  return PyBool_FromLong(match);
}

// gate.release(): drops every reference to what is watched (its root died), keeping no
// verdict: from then on each call checks the watched guards (the recheck).
PyObject* Release(PyObject* self_, PyObject*) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  PyObject* empty = PyTuple_New(0);
  if (empty == nullptr) return nullptr;
  if (Set(self, empty, empty, empty, -1) < 0) {
    Py_DECREF(empty);
    return nullptr;
  }
  Py_INCREF(empty);
  Py_XSETREF(self->tensors, empty);
  Py_CLEAR(self->frozen);
  Py_DECREF(empty);
  Py_RETURN_NONE;
}

// gate.freeze(objects): the hook dicts and classes whose whole contents the recheck compares;
// a change to one is reported to it (recheck's `changed` 2), else it skips the comparison.
PyObject* Freeze(PyObject* self_, PyObject* given) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  if (!PyTuple_Check(given)) {
    PyErr_SetString(PyExc_TypeError, "WatchGate.freeze takes a tuple of dicts and classes");
    return nullptr;
  }
  PyObject* frozen = WatchedDicts(given, WATCHER(frozen_watcher_id));
  if (frozen == nullptr) return nullptr;
  Py_XSETREF(self->frozen, frozen);
  ArmFrozen(self);
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"freeze", Freeze, METH_O,
     "freeze(objects): the hook dicts and classes the recheck compares whole, armed on their state now"},
    {"release", Release, METH_NOARGS,
     "release(): drop every reference to what is watched (its root died); each later call checks again"},
    {"reset", Reset, METH_VARARGS,
     "reset(dicts, roots, keyed[, tensors, tensor_check]): watch these instead, with no verdict kept (the next "
     "call checks again)"},
    {"roots_match", RootsMatchMethod, METH_O, "roots_match(f_locals): whether every root is the recorded object"},
    {nullptr, nullptr, 0, nullptr},
};

int Traverse(PyObject* self_, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  Py_VISIT(self->recheck);
  Py_VISIT(self->held);
  Py_VISIT(self->dicts);
  Py_VISIT(self->roots);
  Py_VISIT(self->keyed);
  Py_VISIT(self->tensors);
  Py_VISIT(self->frozen);
  Py_VISIT(self->tensor_check);
  return 0;
}

int Clear(PyObject* self_) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  Py_CLEAR(self->recheck);
  Py_CLEAR(self->held);
  Py_CLEAR(self->dicts);
  Py_CLEAR(self->roots);
  Py_CLEAR(self->keyed);
  Py_CLEAR(self->tensors);
  Py_CLEAR(self->frozen);
  Py_CLEAR(self->tensor_check);
  return 0;
}

void Dealloc(PyObject* self_) {
  PyObject_GC_UnTrack(self_);
  Clear(self_);
  delete reinterpret_cast<WatchGate*>(self_)->versions;
  delete reinterpret_cast<WatchGate*>(self_)->frozen_versions;
  Py_TYPE(self_)->tp_free(self_);
}

PyObject* GetRechecks(PyObject* self_, void*) {
  return PyLong_FromLongLong(reinterpret_cast<WatchGate*>(self_)->rechecks);
}

PyObject* GetWatched(PyObject* self_, void*) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  return PyLong_FromSsize_t(self->dicts == nullptr ? 0 : PyTuple_GET_SIZE(self->dicts));
}

PyObject* GetVerdict(PyObject* self_, void*) {
  const int verdict = reinterpret_cast<WatchGate*>(self_)->verdict;
  if (verdict < 0) Py_RETURN_NONE;
  return PyBool_FromLong(verdict);
}

PyGetSetDef getset[] = {
    {const_cast<char*>("rechecks"), GetRechecks, nullptr,
     const_cast<char*>("how many calls evaluated the watched guards (a change, a first call, another root)"), nullptr},
    {const_cast<char*>("watched"), GetWatched, nullptr, const_cast<char*>("how many dicts are watched"), nullptr},
    {const_cast<char*>("verdict"), GetVerdict, nullptr,
     const_cast<char*>("the verdict kept since the last recheck (None before the first)"), nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject watch_gate_type = [] {
// The C API's idiom: the head set, every other slot zero (set below where needed).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
#pragma GCC diagnostic pop
  t.tp_name = "guardpolicy._core.WatchGate";
  t.tp_basicsize = sizeof(WatchGate);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_doc = "WatchGate(dicts, roots, keyed, recheck[, tensors, tensor_check]): a cache entry's watched guards, checked in C only when "
             "what they read changed (watch_gate.h)";
  t.tp_vectorcall_offset = offsetof(WatchGate, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_new = New;
  t.tp_init = Init;
  t.tp_traverse = Traverse;
  t.tp_clear = Clear;
  t.tp_dealloc = Dealloc;
  t.tp_getset = getset;
  t.tp_methods = methods;
  return t;
}();

}  // namespace

void BindWatchGate(pybind11::module_& m) {
#if PY_VERSION_HEX >= 0x030C0000
  if (watcher_id < 0) {
    watcher_id = PyDict_AddWatcher(OnDictEvent);
    if (watcher_id < 0) throw pybind11::error_already_set();
  }
  if (frozen_watcher_id < 0) {
    frozen_watcher_id = PyDict_AddWatcher(OnFrozenEvent);
    if (frozen_watcher_id < 0) throw pybind11::error_already_set();
  }
#endif
  if (PyType_Ready(&watch_gate_type) < 0) throw pybind11::error_already_set();
  Py_INCREF(&watch_gate_type);
  m.add_object("WatchGate", reinterpret_cast<PyObject*>(&watch_gate_type));
}

}  // namespace guardpolicy::python
