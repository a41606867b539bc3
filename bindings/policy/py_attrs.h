// py_attrs.h: reading Python attributes through the public CPython API, by names interned
// once (the extractor's and the source-path walker's shared helpers).
//
// Each user keeps its own enum of attribute indices and table of spellings and interns the
// table once with InternNames; GetAttr / GetOptionalAttr / Truth take the interned name.
// Errors: Python exceptions propagate as pybind11::error_already_set.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// The interned str of each of `names[0..count)`; never freed: they live as long as the
// interpreter (call it once, from a function-local static).
inline PyObject** InternNames(const char* const* names, int count) {
  auto** out = new PyObject*[count];
  for (int i = 0; i < count; ++i) out[i] = PyUnicode_InternFromString(names[i]);
  return out;
}

inline pybind11::object GetAttr(pybind11::handle obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj.ptr(), name);
  if (r == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::object>(r);
}

// The attribute, or an empty object when `obj` has none (an AttributeError, as hasattr
// sees it); any other exception propagates.
inline pybind11::object GetOptionalAttr(pybind11::handle obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj.ptr(), name);
  if (r != nullptr) return pybind11::reinterpret_steal<pybind11::object>(r);
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw pybind11::error_already_set();
  PyErr_Clear();
  return pybind11::object();
}

inline bool Truth(pybind11::handle obj) {
  const int r = PyObject_IsTrue(obj.ptr());
  if (r < 0) throw pybind11::error_already_set();
  return r == 1;
}

}  // namespace guardpolicy::python
