// watch_gate.cpp: the WatchGate type (see watch_gate.h), against the CPython API of 3.11 to 3.13.
#include "watch_gate.h"

#include <memory>

#include "../py_type.h"
#include "watch_index.h"
#include "watch_state.h"

namespace guardpolicy::python {
namespace {

struct WatchGate {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* recheck;  // recheck(f_locals, state or None) -> (verdict, new state or None)
  PyObject* states;   // a tuple of WatchState, the most recently installed first
  std::shared_ptr<const StateIndex>* index;  // of `states`, replaced with it
  Py_ssize_t capacity;
  long long rechecks;
  long long calls;  // every call of the gate: the recheck tells rechecks in a row by it
  PyObject* hot_check;  // while hot_left > 0: answers the call (go_hot), else NULL
  long long hot_left;
  long long hot_calls;  // the calls hot_check answered
  bool hot_with_state;  // hot only where the call's state holds what it was built of
  bool released;        // release(): its cache entry is gone, and what it held with it
};

// Replaces the gate's states (a new reference, stolen) and their index; the old tuple is freed
// last: its finalizers see a whole gate. 0, or -1 with an exception set (the gate unchanged).
int SetStates(WatchGate* self, PyObject* states) {
  std::shared_ptr<const StateIndex> index;
  try {
    index = std::make_shared<const StateIndex>(states);
  } catch (const std::bad_alloc&) {
    Py_DECREF(states);
    PyErr_NoMemory();
    return -1;
  }
  if (self->index == nullptr) {
    self->index = new (std::nothrow) std::shared_ptr<const StateIndex>();
    if (self->index == nullptr) {
      Py_DECREF(states);
      PyErr_NoMemory();
      return -1;
    }
  }
  *self->index = std::move(index);
  Py_XSETREF(self->states, states);
  return 0;
}

// Makes `fresh` (or nobody) the first state, drops `replaced` and every state whose roots
// died, and keeps at most `capacity`. 0, or -1 with an exception set.
int Install(WatchGate* self, PyObject* fresh, PyObject* replaced) {
  PyObject* kept = PyList_New(0);
  if (kept == nullptr) return -1;
  if (fresh != nullptr && PyList_Append(kept, fresh) < 0) {
    Py_DECREF(kept);
    return -1;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->states) && PyList_GET_SIZE(kept) < self->capacity; ++i) {
    PyObject* state = PyTuple_GET_ITEM(self->states, i);
    if (state == replaced || state == fresh || !RootsAlive(reinterpret_cast<WatchState*>(state))) continue;
    if (PyList_Append(kept, state) < 0) {
      Py_DECREF(kept);
      return -1;
    }
  }
  PyObject* states = PyList_AsTuple(kept);
  Py_DECREF(kept);
  return states == nullptr ? -1 : SetStates(self, states);
}

// The checking step: runs `recheck`, then arms `state` (or installs the state it returned)
// with its verdict. A new reference to the call's verdict, or NULL with an exception set.
PyObject* Recheck(WatchGate* self, PyObject* f_locals, WatchState* state) {
  WatchSnapshot snap;
  if (state != nullptr && TakeSnapshot(state, &snap) < 0) return nullptr;
  ++self->rechecks;
  PyObject* given = state != nullptr ? reinterpret_cast<PyObject*>(state) : Py_None;
  PyObject* call_args[2] = {f_locals, given};
  if (self->recheck == nullptr) {  // released since the call began
    ReleaseSnapshot(&snap);
    Py_RETURN_FALSE;
  }
  // a release() while it runs drops the field, not this reference
  PyObject* recheck = Py_NewRef(self->recheck);
  PyObject* out = PyObject_Vectorcall(recheck, call_args, 2, nullptr);
  Py_DECREF(recheck);
  if (out == nullptr || !PyTuple_Check(out) || PyTuple_GET_SIZE(out) != 2 ||
      (PyTuple_GET_ITEM(out, 1) != Py_None && PyTuple_GET_ITEM(out, 1) != Py_False &&
       !IsWatchState(PyTuple_GET_ITEM(out, 1)))) {
    if (out != nullptr)
      PyErr_SetString(PyExc_TypeError, "WatchGate's recheck returns (verdict, WatchState, None or False)");
    Py_XDECREF(out);
    ReleaseSnapshot(&snap);
    return nullptr;
  }
  const int truth = PyObject_IsTrue(PyTuple_GET_ITEM(out, 0));
  const bool drop = PyTuple_GET_ITEM(out, 1) == Py_False;  // the given state holds what is no longer there
  auto* fresh = reinterpret_cast<WatchState*>(PyTuple_GET_ITEM(out, 1) == Py_None || drop ? nullptr
                                                                                         : PyTuple_GET_ITEM(out, 1));
  if (truth < 0 || self->released) {  // released while it ran: nothing is installed or armed
    Py_DECREF(out);
    ReleaseSnapshot(&snap);
    return truth < 0 ? nullptr : PyBool_FromLong(0);
  }
  if (fresh != nullptr) {
    fresh->verdict = truth;  // armed when it was built, before the recheck evaluated anything
    ReleaseSnapshot(&snap);
    if (Install(self, reinterpret_cast<PyObject*>(fresh), given) < 0) {
      Py_DECREF(out);
      return nullptr;
    }
  } else if (drop && state != nullptr) {
    ReleaseSnapshot(&snap);
    if (Install(self, nullptr, given) < 0) {
      Py_DECREF(out);
      return nullptr;
    }
    state = nullptr;  // still alive here (the call holds it), no longer the gate's
  } else if (state != nullptr) {
    ArmState(state, &snap, truth);
  }
  WatchState* served = fresh != nullptr ? fresh : state;
  PyObject* result = truth && served != nullptr ? TensorsMatch(served) : PyBool_FromLong(truth);
  Py_DECREF(out);
  return result;
}

// A hot call (go_hot): hot_check(f_locals), and with `state`, its tensor check on a pass. A new
// reference to the verdict, or NULL with an exception set.
PyObject* HotAnswer(WatchGate* self, PyObject* f_locals, WatchState* state) {
  --self->hot_left;
  ++self->hot_calls;
  PyObject* check = self->hot_check;
  Py_INCREF(check);  // a go_hot while it runs replaces the field, not this one
  PyObject* result = PyObject_Vectorcall(check, &f_locals, 1, nullptr);
  Py_DECREF(check);
  if (result == nullptr || state == nullptr) return result;
  const int truth = PyObject_IsTrue(result);
  Py_DECREF(result);
  if (truth < 0) return nullptr;
  return truth ? TensorsMatch(state) : PyBool_FromLong(0);
}

PyObject* Call(PyObject* self_, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  if (self->recheck == nullptr) {
    if (self->released) Py_RETURN_FALSE;  // serves nothing once its plan or entry is gone
    PyErr_SetString(PyExc_TypeError, "WatchGate.__init__(recheck[, capacity]) was not called");
    return nullptr;
  }
  ++self->calls;
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)) {
    PyErr_SetString(PyExc_TypeError, "WatchGate takes the frame locals, one positional argument");
    return nullptr;
  }
  // hot (runtime/watch/hot.py): torch's manager of the guards answers, with no state
  if (self->hot_left > 0 && !self->hot_with_state) return HotAnswer(self, args[0], nullptr);
  PyObject* states = self->states;
  Py_INCREF(states);  // a prune or an install while this call runs replaces the tuple, not this one
  const std::shared_ptr<const StateIndex> index = *self->index;  // and its index
  WatchState* state = index->Find(states, args[0]);
  PyObject* result = nullptr;
  if (state == nullptr && PyErr_Occurred()) {
    Py_DECREF(states);
    return nullptr;
  }
  Py_XINCREF(state);
  // hot, where the state passed and holds what it was built of: a state armed failing (built
  // on a replaced tensor, say) or not checked yet is never answered by the watched guards alone
  if (self->hot_left > 0 && state != nullptr && state->verdict > 0) {
    const int stale = StateStale(state);
    if (stale <= 0) {
      result = stale < 0 ? nullptr : HotAnswer(self, args[0], state);
      Py_DECREF(state);
      Py_DECREF(states);
      return result;
    }
  }
  const int changed = state == nullptr || state->verdict < 0 ? 1 : StateChanged(state);
  if (changed == 0) {
    result = state->verdict ? TensorsMatch(state) : PyBool_FromLong(0);
  } else if (changed > 0) {
    result = Recheck(self, args[0], state);
  }
  Py_XDECREF(state);
  Py_DECREF(states);
  return result;
}

PyObject* New(PyTypeObject* type, PyObject*, PyObject*) {
  auto* self = reinterpret_cast<WatchGate*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->vectorcall = Call;
  self->capacity = kStatesPerEntry;
  PyObject* empty = PyTuple_New(0);
  if (empty == nullptr || SetStates(self, empty) < 0) {
    Py_DECREF(self);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

int Init(PyObject* self_, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"recheck", "capacity", nullptr};
  PyObject* recheck;
  Py_ssize_t capacity = kStatesPerEntry;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|n:WatchGate", const_cast<char**>(keywords), &recheck, &capacity))
    return -1;
  if (capacity < 1) {
    PyErr_SetString(PyExc_ValueError, "WatchGate keeps at least one state (capacity >= 1)");
    return -1;
  }
  auto* self = reinterpret_cast<WatchGate*>(self_);
  Py_INCREF(recheck);
  Py_XSETREF(self->recheck, recheck);
  self->capacity = capacity;
  return 0;
}

PyObject* InstallMethod(PyObject* self_, PyObject* state) {
  if (!IsWatchState(state)) {
    PyErr_SetString(PyExc_TypeError, "WatchGate.install takes a WatchState");
    return nullptr;
  }
  if (reinterpret_cast<WatchGate*>(self_)->released) Py_RETURN_NONE;
  if (Install(reinterpret_cast<WatchGate*>(self_), state, nullptr) < 0) return nullptr;
  Py_RETURN_NONE;
}

PyObject* Prune(PyObject* self_, PyObject*) {
  if (Install(reinterpret_cast<WatchGate*>(self_), nullptr, nullptr) < 0) return nullptr;
  Py_RETURN_NONE;
}

int Clear(PyObject* self_);

PyObject* Release(PyObject* self_, PyObject*) {
  reinterpret_cast<WatchGate*>(self_)->released = true;
  if (Clear(self_) < 0) return nullptr;
  Py_RETURN_NONE;
}

PyObject* GoHot(PyObject* self_, PyObject* args) {
  PyObject* check;
  long long calls;
  int with_state = 0;
  if (!PyArg_ParseTuple(args, "OL|p:go_hot", &check, &calls, &with_state)) return nullptr;
  if (!PyCallable_Check(check)) {
    PyErr_SetString(PyExc_TypeError, "WatchGate.go_hot(check, calls): check must be callable");
    return nullptr;
  }
  auto* self = reinterpret_cast<WatchGate*>(self_);
  if (self->released) Py_RETURN_NONE;
  Py_INCREF(check);
  Py_XSETREF(self->hot_check, check);
  self->hot_left = calls > 0 ? calls : 0;
  self->hot_with_state = with_state != 0;
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"install", InstallMethod, METH_O, "install(state): adds a WatchState ahead of the others"},
    {"go_hot", GoHot, METH_VARARGS,
     "go_hot(check, calls, with_state=False): the next `calls` calls are answered by check(f_locals), with no "
     "state; with_state: only where the call's state holds what it was built of (then its tensor check too)"},
    {"prune", Prune, METH_VARARGS, "prune(*_): drops the states whose roots died (a weak reference's callback)"},
    {"release", Release, METH_NOARGS,
     "release(): drops its states, recheck and hot check; every later call fails (its cache "
     "entry or plan is gone)"},
    {nullptr, nullptr, 0, nullptr},
};

int Traverse(PyObject* self_, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  Py_VISIT(self->recheck);
  Py_VISIT(self->states);
  Py_VISIT(self->hot_check);
  return 0;
}

int Clear(PyObject* self_) {
  auto* self = reinterpret_cast<WatchGate*>(self_);
  Py_CLEAR(self->recheck);
  self->hot_left = 0;
  Py_CLEAR(self->hot_check);
  PyObject* empty = PyTuple_New(0);  // never NULL: a call in flight may still read it
  return empty == nullptr ? -1 : SetStates(self, empty);
}

void Dealloc(PyObject* self_) {
  PyObject_GC_UnTrack(self_);
  auto* self = reinterpret_cast<WatchGate*>(self_);
  Py_CLEAR(self->recheck);
  Py_CLEAR(self->states);
  Py_CLEAR(self->hot_check);
  delete self->index;
  self->index = nullptr;
  Py_TYPE(self_)->tp_free(self_);
}

PyObject* GetRechecks(PyObject* self_, void*) {
  return PyLong_FromLongLong(reinterpret_cast<WatchGate*>(self_)->rechecks);
}

PyObject* GetCalls(PyObject* self_, void*) {
  return PyLong_FromLongLong(reinterpret_cast<WatchGate*>(self_)->calls);
}

PyObject* GetHotCalls(PyObject* self_, void*) {
  return PyLong_FromLongLong(reinterpret_cast<WatchGate*>(self_)->hot_calls);
}

PyObject* GetStates(PyObject* self_, void*) {
  PyObject* states = reinterpret_cast<WatchGate*>(self_)->states;
  Py_INCREF(states);
  return states;
}

PyGetSetDef getset[] = {
    {const_cast<char*>("rechecks"), GetRechecks, nullptr,
     const_cast<char*>("how many calls ran the recheck (a change, a first call, roots with no state)"), nullptr},
    {const_cast<char*>("calls"), GetCalls, nullptr,
     const_cast<char*>("how many calls the gate checked (rechecks in a row: the watch's hot groups)"), nullptr},
    {const_cast<char*>("hot_calls"), GetHotCalls, nullptr,
     const_cast<char*>("how many calls were answered hot (go_hot), with no state"), nullptr},
    {const_cast<char*>("states"), GetStates, nullptr,
     const_cast<char*>("the WatchStates kept, the most recently installed first"), nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject gate_type = [] {
  PyTypeObject t = GcType("guardpolicy._core.WatchGate", sizeof(WatchGate), Py_TPFLAGS_HAVE_VECTORCALL,
                          "WatchGate(recheck, capacity=128): a cache entry's watched guards, checked in C only when what "
                          "they read changed (watch_gate.h)",
                          Traverse, Clear, Dealloc);
  t.tp_vectorcall_offset = offsetof(WatchGate, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_new = New;
  t.tp_init = Init;
  t.tp_getset = getset;
  t.tp_methods = methods;
  return t;
}();

}  // namespace

void BindWatchGate(pybind11::module_& m) {
  BindWatchState(m);
  AddType(m, "WatchGate", &gate_type);
  m.attr("WATCH_STATES_PER_ENTRY") = kStatesPerEntry;
}

}  // namespace guardpolicy::python
