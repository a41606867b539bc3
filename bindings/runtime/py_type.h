// py_type.h: the CPython type boilerplate the hand-written extension types share (CallLayer,
// WatchState, WatchGate): a garbage-collected type whose slots are zero but those given, and
// its registration on the `_core` module.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// A type `name` of `size` bytes, collected by the cycle collector (traverse, clear and dealloc
// given), with `flags` added to Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC and every other slot
// zero; the caller sets the slots it needs (tp_new, tp_methods, ...) before AddType.
inline PyTypeObject GcType(const char* name, Py_ssize_t size, unsigned long flags, const char* doc,
                           traverseproc traverse, inquiry clear, destructor dealloc) {
// The C API's idiom: the head set, every other slot zero.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
#pragma GCC diagnostic pop
  t.tp_name = name;
  t.tp_basicsize = size;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | flags;
  t.tp_doc = doc;
  t.tp_traverse = traverse;
  t.tp_clear = clear;
  t.tp_dealloc = dealloc;
  return t;
}

// Readies `type` and adds it to `m` as `attr`. Raises error_already_set.
inline void AddType(pybind11::module_& m, const char* attr, PyTypeObject* type) {
  if (PyType_Ready(type) < 0) throw pybind11::error_already_set();
  Py_INCREF(type);
  m.add_object(attr, reinterpret_cast<PyObject*>(type));
}

// The standard dealloc of a collected type whose tp_clear drops every reference.
template <inquiry Clear>
void GcDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  Clear(self);
  Py_TYPE(self)->tp_free(self);
}

}  // namespace guardpolicy::python
