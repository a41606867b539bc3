// type_checks.cpp: the isinstance shortcuts of type_checks.h.
#include "type_checks.h"

#include "fast_attr.h"

#include <cstring>

#include <pybind11/eval.h>

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

// value.__class__ is type(value): attribute lookup is object's (`__getattribute__` not
// overridden; a `__getattr__` runs only on a miss) and finds object's `__class__` descriptor.
bool DefaultClass(py::handle value) {
  static PyObject* const name = InternedName("__class__");
  PyTypeObject* t = Py_TYPE(value.ptr());
  return DataDescriptorsWin(t) && _PyType_Lookup(t, name) == _PyType_Lookup(&PyBaseObject_Type, name);
}

// torch.nn.parameter._ParameterMeta.__instancecheck__ as torch 2.0-2.13 write it.
constexpr const char* kTorchParameterCheck = R"(
class _ParameterMeta(type):
    def __instancecheck__(self, instance):
        if self is Parameter:
            if isinstance(instance, torch.Tensor) and getattr(instance, "_is_param", False):
                return True
        return super().__instancecheck__(instance)
)";

// Whether `fn` is that function: the same bytecode, names, constants and free variables,
// its `super()` cell holding `meta`, and `Parameter`, `torch`, `isinstance`, `getattr` and
// `super` naming what they name in torch.
bool IsTorchParameterCheck(PyObject* fn, PyObject* meta, PyObject* parameter) {
  try {
    if (!PyFunction_Check(fn)) return false;
    py::dict scope;
    py::exec(kTorchParameterCheck, scope);
    py::object ref = scope["_ParameterMeta"].attr("__dict__")["__instancecheck__"].attr("__code__");
    py::handle f(fn);
    py::object code = f.attr("__code__");
    for (const char* attr : {"co_code", "co_names", "co_consts", "co_freevars", "co_argcount", "co_kwonlyargcount"}) {
      if (!code.attr(attr).equal(ref.attr(attr))) return false;
    }
    py::tuple closure = f.attr("__closure__");
    if (closure.size() != 1 || closure[0].attr("cell_contents").ptr() != meta) return false;
    py::dict globals = f.attr("__globals__");
    py::module_ torch = py::module_::import("torch"), builtins = py::module_::import("builtins");
    if (!globals.contains("Parameter") || py::object(globals["Parameter"]).ptr() != parameter) return false;
    if (!globals.contains("torch") || py::object(globals["torch"]).ptr() != torch.ptr()) return false;
    py::dict fn_builtins = f.attr("__builtins__");
    for (const char* name : {"isinstance", "getattr", "super"}) {
      if (globals.contains(name) || !fn_builtins.contains(name) ||
          py::object(fn_builtins[name]).ptr() != py::object(builtins.attr(name)).ptr()) {
        return false;
      }
    }
    return true;
  } catch (py::error_already_set&) {
    return false;
  }
}

// type(torch.nn.Parameter).__instancecheck__ is torch's own (IsTorchParameterCheck),
// remembered per function and code object (assigning `__code__` is noticed).
bool TorchParameterCheck(PyObject* parameter) {
  static PyObject* const name = InternedName("__instancecheck__");
  static PyObject* known = nullptr;       // the function once recognized (held)
  static PyObject* known_code = nullptr;  // and its code object then (held)
  PyObject* check = _PyType_Lookup(Py_TYPE(parameter), name);
  if (check == nullptr) return false;
  if (check == known && PyFunction_Check(check) && PyFunction_GET_CODE(check) == known_code) return true;
  if (!IsTorchParameterCheck(check, reinterpret_cast<PyObject*>(Py_TYPE(parameter)), parameter)) return false;
  Py_XDECREF(known);
  Py_XDECREF(known_code);
  known = check;
  known_code = PyFunction_GET_CODE(check);
  Py_INCREF(known);
  Py_INCREF(known_code);
  return true;
}
#endif

// isinstance(value, cls) for a class whose instance check is type's own, from the types:
// 1, 0, or -1 when the value's __class__ may not be its type.
int FromTypes(py::handle value, PyObject* cls) {
#ifdef GUARDPOLICY_TYPE_LOOKUP
  if (g_shortcuts && PlainInstanceCheck(cls)) {
    if (IsSubtype(value, cls)) return 1;
    if (DefaultClass(value)) return 0;
  }
#else
  (void)value, (void)cls;
#endif
  return -1;
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

static PyObject* TorchClass(TorchKind kind) {
  const TorchTypes& t = Torch();
  return kind == TorchKind::kTensor ? t.tensor : kind == TorchKind::kParameter ? t.parameter : t.module;
}

// isinstance(value, torch.nn.Parameter) from the types (and torch's own check), or -1.
static int ParameterFromTypes(py::handle value) {
  const TorchTypes& t = Torch();
  if (Py_TYPE(value.ptr()) == reinterpret_cast<PyTypeObject*>(t.parameter)) return 1;  // as isinstance
#ifdef GUARDPOLICY_TYPE_LOOKUP
  if (g_shortcuts && PlainInstanceCheck(t.tensor) && DefaultClass(value) && TorchParameterCheck(t.parameter)) {
    if (IsSubtype(value, t.parameter)) return 1;  // torch's check ends in type's
    if (!IsSubtype(value, t.tensor)) return 0;
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
    if (found == 0) return 0;
    const int truth = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (truth < 0) throw py::error_already_set();
    return truth;
  }
#endif
  return -1;
}

int IsInstanceFromTypes(py::handle value, TorchKind kind) {
  return kind == TorchKind::kParameter ? ParameterFromTypes(value) : FromTypes(value, TorchClass(kind));
}

bool CallIsInstance(py::handle value, TorchKind kind) { return SlowIsInstance(value, TorchClass(kind)); }

bool IsInstanceOf(py::handle value, TorchKind kind) {
  const int r = IsInstanceFromTypes(value, kind);
  return r >= 0 ? r == 1 : CallIsInstance(value, kind);
}

void SetTypeCheckShortcuts(bool enabled) { g_shortcuts = enabled; }

}  // namespace guardpolicy::python
