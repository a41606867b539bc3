// call_layer.cpp: the CallLayer type (see call_layer.h), written against the stable parts of
// the CPython API (vectorcall, 3.9+) so that one source serves Python 3.11 to 3.13.
#include "call_layer.h"

#include "py_type.h"

#include <structmember.h>

#include <cstddef>
#include <vector>

namespace guardpolicy::python {
namespace {

struct CallLayer {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* inner;    // torch's compiled callable
  PyObject* stats;    // the runtime.call.stance.Stance that counts the calls
  PyObject* pending;  // a list: frames compiled and not yet filed (verify.Guards.pending)
};

enum Name { kCalls, kVerifyEvery, kSampled, kSettle, kFailed, kNameCount };
PyObject* names[kNameCount];

// stats.call_count + 1, stored back; the new count, or -1 with an exception set.
long long Count(PyObject* stats) {
  PyObject* calls = PyObject_GetAttr(stats, names[kCalls]);
  if (calls == nullptr) return -1;
  long long n = PyLong_AsLongLong(calls);
  Py_DECREF(calls);
  if (n == -1 && PyErr_Occurred()) return -1;
  PyObject* next = PyLong_FromLongLong(n + 1);
  if (next == nullptr) return -1;
  int rc = PyObject_SetAttr(stats, names[kCalls], next);
  Py_DECREF(next);
  return rc < 0 ? -1 : n + 1;
}

// stats.verify_every as a C integer (0 without verify); -1 with an exception set.
long long Every(PyObject* stats) {
  PyObject* every = PyObject_GetAttr(stats, names[kVerifyEvery]);
  if (every == nullptr) return -1;
  long long n = every == Py_None ? 0 : PyLong_AsLongLong(every);
  Py_DECREF(every);
  return n == -1 && PyErr_Occurred() ? -1 : n;
}

// self._sampled(call, *args, **kwargs); 0, or -1 with its exception set.
int Sampled(PyObject* self, long long call, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  PyObject* number = PyLong_FromLongLong(call);
  if (number == nullptr) return -1;
  std::vector<PyObject*> stack(static_cast<size_t>(2 + nargs + nkw));
  stack[0] = self;
  stack[1] = number;
  for (Py_ssize_t i = 0; i < nargs + nkw; ++i) stack[static_cast<size_t>(2 + i)] = args[i];
  PyObject* r = PyObject_VectorcallMethod(names[kSampled], stack.data(), static_cast<size_t>(2 + nargs), kwnames);
  Py_DECREF(number);
  if (r == nullptr) return -1;
  Py_DECREF(r);
  return 0;
}

// self._settle() when `pending` holds frames, keeping the call's own exception (if any) unless
// the settle raises; returns `result` (NULL when the call or the settle raised).
PyObject* SettleAfter(CallLayer* self, PyObject* result) {
  if (PyList_GET_SIZE(self->pending) == 0) return result;
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* raised = PyErr_GetRaisedException();
#else
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
#endif
  PyObject* settled = PyObject_CallMethodNoArgs(reinterpret_cast<PyObject*>(self), names[kSettle]);
  if (settled == nullptr) {  // as in a finally block: the settle's exception replaces the call's
#if PY_VERSION_HEX >= 0x030C0000
    Py_XDECREF(raised);
#else
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
#endif
    Py_XDECREF(result);
    return nullptr;
  }
  Py_DECREF(settled);
#if PY_VERSION_HEX >= 0x030C0000
  if (raised != nullptr) PyErr_SetRaisedException(raised);
#else
  if (type != nullptr) PyErr_Restore(type, value, traceback);
#endif
  return result;
}

// After `inner` raised a RuntimeError: self._failed(exception, *args, **kwargs), whose result
// (a retry's) replaces the failure, or whose exception (the same one, re-raised) stays. Other
// exceptions pass untouched. Only a failing call pays for this.
PyObject* AfterFailure(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return nullptr;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  std::vector<PyObject*> stack(static_cast<size_t>(2 + nargs + nkw));
  stack[0] = self;
  stack[1] = value;
  for (Py_ssize_t i = 0; i < nargs + nkw; ++i) stack[static_cast<size_t>(2 + i)] = args[i];
  PyObject* r = PyObject_VectorcallMethod(names[kFailed], stack.data(), static_cast<size_t>(2 + nargs), kwnames);
  Py_DECREF(value);
  return r;
}

PyObject* Call(PyObject* self_, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<CallLayer*>(self_);
  if (self->inner == nullptr || self->stats == nullptr || self->pending == nullptr) {
    PyErr_SetString(PyExc_TypeError, "CallLayer.__init__(inner, stats, pending) was not called");
    return nullptr;
  }
  long long call = Count(self->stats);
  if (call < 0) return nullptr;
  long long every = Every(self->stats);
  if (every < 0) return nullptr;
  if (every > 0 && call % every == 0 && Sampled(self_, call, args, nargsf, kwnames) < 0) return nullptr;
  PyObject* result = PyObject_Vectorcall(self->inner, args, nargsf, kwnames);
  if (result == nullptr) result = AfterFailure(self_, args, nargsf, kwnames);
  return SettleAfter(self, result);
}

PyObject* New(PyTypeObject* type, PyObject*, PyObject*) {
  auto* self = reinterpret_cast<CallLayer*>(type->tp_alloc(type, 0));
  if (self != nullptr) self->vectorcall = Call;
  return reinterpret_cast<PyObject*>(self);
}

int Init(PyObject* self_, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"inner", "stats", "pending", nullptr};
  PyObject *inner, *stats, *pending;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!:CallLayer", const_cast<char**>(keywords), &inner, &stats,
                                   &PyList_Type, &pending))
    return -1;
  auto* self = reinterpret_cast<CallLayer*>(self_);
  Py_INCREF(inner);
  Py_INCREF(stats);
  Py_INCREF(pending);
  Py_XSETREF(self->inner, inner);
  Py_XSETREF(self->stats, stats);
  Py_XSETREF(self->pending, pending);
  return 0;
}

int Traverse(PyObject* self_, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<CallLayer*>(self_);
  Py_VISIT(self->inner);
  Py_VISIT(self->stats);
  Py_VISIT(self->pending);
  return 0;
}

int Clear(PyObject* self_) {
  auto* self = reinterpret_cast<CallLayer*>(self_);
  Py_CLEAR(self->inner);
  Py_CLEAR(self->stats);
  Py_CLEAR(self->pending);
  return 0;
}

PyMemberDef members[] = {
    {const_cast<char*>("inner"), T_OBJECT_EX, offsetof(CallLayer, inner), 0,
     const_cast<char*>("torch's compiled callable, which every call runs")},
    {const_cast<char*>("stats"), T_OBJECT_EX, offsetof(CallLayer, stats), READONLY,
     const_cast<char*>("the Stance whose call_count counts the calls and whose verify_every samples them")},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject call_layer_type = [] {
  PyTypeObject t = GcType("guardpolicy._core.CallLayer", sizeof(CallLayer),
                          Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_VECTORCALL,
                          "CallLayer(inner, stats, pending): verify's per-call counting and sampling in C (call_layer.h)",
                          Traverse, Clear, GcDealloc<Clear>);
  t.tp_vectorcall_offset = offsetof(CallLayer, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_new = New;
  t.tp_init = Init;
  t.tp_members = members;
  return t;
}();

}  // namespace

void BindCallLayer(pybind11::module_& m) {
  static const char* const spellings[kNameCount] = {"call_count", "verify_every", "_sampled", "_settle", "_failed"};
  for (int i = 0; i < kNameCount; ++i) {
    names[i] = PyUnicode_InternFromString(spellings[i]);
    if (names[i] == nullptr) throw pybind11::error_already_set();
  }
  AddType(m, "CallLayer", &call_layer_type);
}

}  // namespace guardpolicy::python
