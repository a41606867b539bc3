// type_checks.cpp: the isinstance shortcuts of type_checks.h.
#include "type_checks.h"

#include <cstring>

namespace guardpolicy::python {
namespace py = pybind11;

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define GUARDPOLICY_TYPE_LOOKUP 1
#endif

namespace {

bool g_shortcuts = true;

bool SlowIsInstance(py::handle value, PyObject* cls) {
  const int r = PyObject_IsInstance(value.ptr(), cls);
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

bool IsSubtype(py::handle value, PyObject* cls) {
  return PyType_IsSubtype(Py_TYPE(value.ptr()), reinterpret_cast<PyTypeObject*>(cls)) != 0;
}

#ifdef GUARDPOLICY_TYPE_LOOKUP
PyObject* InternedName(const char* s) { return PyUnicode_InternFromString(s); }

// type(cls).__instancecheck__ is type.__instancecheck__ (found through the type cache).
bool PlainInstanceCheck(PyObject* cls) {
  static PyObject* const name = InternedName("__instancecheck__");
  PyTypeObject* meta = Py_TYPE(cls);
  return meta == &PyType_Type || _PyType_Lookup(meta, name) == _PyType_Lookup(&PyType_Type, name);
}

// value.__class__ is type(value): object's `__class__` descriptor is the one found.
bool DefaultClass(py::handle value) {
  static PyObject* const name = InternedName("__class__");
  return _PyType_Lookup(Py_TYPE(value.ptr()), name) == _PyType_Lookup(&PyBaseObject_Type, name);
}

// type(torch.nn.Parameter).__instancecheck__ is torch's _ParameterMeta.__instancecheck__
// (by qualified name and module, remembered per function object).
bool TorchParameterCheck(PyObject* parameter) {
  static PyObject* const name = InternedName("__instancecheck__");
  static PyObject* known = nullptr;  // the function once recognized (a reference is kept)
  PyObject* check = _PyType_Lookup(Py_TYPE(parameter), name);
  if (check == nullptr) return false;
  if (check == known) return true;
  py::handle fn(check);
  if (!py::hasattr(fn, "__qualname__") || !py::hasattr(fn, "__module__")) return false;
  const bool ours = py::str(fn.attr("__qualname__")).cast<std::string>() == "_ParameterMeta.__instancecheck__" &&
                    py::str(fn.attr("__module__")).cast<std::string>() == "torch.nn.parameter";
  if (ours) {
    Py_XDECREF(known);
    known = check;
    Py_INCREF(known);
  }
  return ours;
}
#endif

// isinstance(value, cls) for a class whose instance check is type's own: decided without
// Python when the value's __class__ is its type.
bool IsInstance(py::handle value, PyObject* cls) {
#ifdef GUARDPOLICY_TYPE_LOOKUP
  if (g_shortcuts && PlainInstanceCheck(cls)) {
    if (IsSubtype(value, cls)) return true;
    if (DefaultClass(value)) return false;
  }
#endif
  return SlowIsInstance(value, cls);
}

}  // namespace

const TorchTypes& Torch() {
  static TorchTypes types;
  if (types.tensor == nullptr) {
    py::module_ torch = py::module_::import("torch");
    types.tensor = py::object(torch.attr("Tensor")).release().ptr();
    types.parameter = py::object(torch.attr("nn").attr("Parameter")).release().ptr();
    types.module = py::object(torch.attr("nn").attr("Module")).release().ptr();
  }
  return types;
}

bool IsTensor(py::handle value) { return IsInstance(value, Torch().tensor); }

bool IsModule(py::handle value) { return IsInstance(value, Torch().module); }

bool IsParameter(py::handle value) {
  const TorchTypes& t = Torch();
  if (IsSubtype(value, t.parameter)) return true;
#ifdef GUARDPOLICY_TYPE_LOOKUP
  if (g_shortcuts && PlainInstanceCheck(t.tensor) && DefaultClass(value) && TorchParameterCheck(t.parameter)) {
    if (!IsSubtype(value, t.tensor)) return false;
    // torch: `isinstance(instance, torch.Tensor) and getattr(instance, "_is_param", False)`,
    // else type's check, which a non-Parameter type with its own __class__ fails.
    static PyObject* const is_param = InternedName("_is_param");
    PyObject* flag = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
    const int found = PyObject_GetOptionalAttr(value.ptr(), is_param, &flag);
#else
    const int found = _PyObject_LookupAttr(value.ptr(), is_param, &flag);
#endif
    if (found < 0) throw py::error_already_set();
    if (found == 0) return false;
    const int truth = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (truth < 0) throw py::error_already_set();
    return truth == 1;
  }
#endif
  return SlowIsInstance(value, t.parameter);  // a tensor may carry `_is_param`
}

void SetTypeCheckShortcuts(bool enabled) { g_shortcuts = enabled; }

}  // namespace guardpolicy::python
