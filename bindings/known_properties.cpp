// known_properties.cpp: see known_properties.h.
#include "known_properties.h"

#include <pybind11/eval.h>
#include <pybind11/pybind11.h>

#include <string>

namespace guardpolicy::python {
namespace py = pybind11;
namespace {

struct Known {
  PyTypeObject* type = nullptr;  // a reference is held while remembered
  unsigned int version = 0;
  bool chain = false;
};

// The code object of `def f(self): return self.<first>.<second>`.
py::object ReferenceCode(const char* first, const char* second) {
  py::dict scope;
  const std::string text = std::string("def f(self):\n    return self.") + first + "." + second + "\n";
  py::exec(text.c_str(), scope);
  return scope["f"].attr("__code__");
}

bool Check(PyTypeObject* type, const char* name, const char* first, const char* second) {
  try {
    PyObject* descr = _PyType_Lookup(type, py::str(name).ptr());
    if (descr == nullptr || !PyObject_TypeCheck(descr, &PyProperty_Type)) return false;
    py::object fget = py::reinterpret_borrow<py::object>(descr).attr("fget");
    if (!PyFunction_Check(fget.ptr()) || PyFunction_GetClosure(fget.ptr()) != nullptr) return false;
    py::object code = fget.attr("__code__"), ref = ReferenceCode(first, second);
    for (const char* attr : {"co_code", "co_names", "co_consts", "co_argcount", "co_kwonlyargcount"}) {
      if (!code.attr(attr).equal(ref.attr(attr))) return false;
    }
    return true;
  } catch (py::error_already_set&) {
    return false;  // cleared by the handler's destructor
  }
}

}  // namespace

bool IsAttributeChainProperty(int site, PyTypeObject* type, const char* name, const char* first, const char* second) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
  static Known known[kPropertySites];
  Known& k = known[site];
  if (k.type == type && k.version == type->tp_version_tag && type->tp_version_tag != 0) return k.chain;
  const bool chain = Check(type, name, first, second);
  Py_INCREF(type);
  Py_XDECREF(reinterpret_cast<PyObject*>(k.type));
  k = Known{type, type->tp_version_tag, chain};
  return chain;
#else
  (void)site, (void)type, (void)name, (void)first, (void)second;
  return false;
#endif
}

}  // namespace guardpolicy::python
