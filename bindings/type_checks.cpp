// type_checks.cpp: the isinstance shortcuts of type_checks.h.
#include "type_checks.h"

#include "fast_attr.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <pybind11/eval.h>

namespace guardpolicy::python {
namespace py = pybind11;


namespace {


bool g_shortcuts = true;
uint64_t g_call = 1;  // BeginCall's counter

bool SlowIsInstance(py::handle value, PyObject* cls) {
  const int r = PyObject_IsInstance(value.ptr(), cls);
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

bool IsSubtype(py::handle value, PyObject* cls) {
  return PyType_IsSubtype(Py_TYPE(value.ptr()), reinterpret_cast<PyTypeObject*>(cls)) != 0;
}

PyObject* InternedName(const char* s) { return PyUnicode_InternFromString(s); }

#ifdef GUARDPOLICY_CPYTHON_TYPE_LOOKUP

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

// `fn`'s code is that function's: the same bytecode, names, constants and free variables.
bool SameCodeAsTorchCheck(PyObject* fn) {
  try {
    static PyObject* ref = nullptr;  // the reference code object (held)
    if (ref == nullptr) {
      py::dict scope;
      py::exec(kTorchParameterCheck, scope);
      ref = py::object(scope["_ParameterMeta"].attr("__dict__")["__instancecheck__"].attr("__code__")).release().ptr();
    }
    py::object code = py::handle(fn).attr("__code__");
    py::handle r(ref);
    for (const char* attr : {"co_code", "co_names", "co_consts", "co_freevars", "co_argcount", "co_kwonlyargcount"}) {
      if (!code.attr(attr).equal(r.attr(attr))) return false;
    }
    return true;
  } catch (py::error_already_set&) {
    return false;
  }
}

// `name` is the interpreter's own builtin function of that name (a C function of the
// builtins module), not a replacement.
bool IsOriginalBuiltin(PyObject* obj, const char* name) {
  if (obj == nullptr || !PyCFunction_Check(obj)) return false;
  const auto* f = reinterpret_cast<PyCFunctionObject*>(obj);
  return std::strcmp(f->m_ml->ml_name, name) == 0 && f->m_self != nullptr && PyModule_Check(f->m_self) &&
         std::strcmp(PyModule_GetName(f->m_self), "builtins") == 0;
}

// What the code relies on around it: its `super()` cell holds `meta`, and `Parameter`,
// `torch`, `isinstance`, `getattr` and `super` name what they name in torch.
bool TorchCheckEnvironment(PyObject* fn, PyObject* meta, PyObject* parameter) {
  static PyObject* const k_parameter = InternedName("Parameter");
  static PyObject* const k_torch = InternedName("torch");
  static PyObject* const k_names[3] = {InternedName("isinstance"), InternedName("getattr"), InternedName("super")};
  PyObject* closure = PyFunction_GetClosure(fn);
  if (closure == nullptr || !PyTuple_Check(closure) || PyTuple_GET_SIZE(closure) != 1 ||
      PyCell_GET(PyTuple_GET_ITEM(closure, 0)) != meta) {
    return false;
  }
  PyObject* globals = PyFunction_GetGlobals(fn);
  if (!PyDict_CheckExact(globals)) return false;
  PyObject* torch = PyImport_GetModule(k_torch);  // new reference or nullptr
  const bool names_ok = PyDict_GetItemWithError(globals, k_parameter) == parameter && torch != nullptr &&
                        PyDict_GetItemWithError(globals, k_torch) == torch;
  Py_XDECREF(torch);
  if (PyErr_Occurred()) PyErr_Clear();
  if (!names_ok) return false;
  PyObject* builtins = reinterpret_cast<PyFunctionObject*>(fn)->func_builtins;
  if (builtins == nullptr || !PyDict_CheckExact(builtins)) return false;
  for (int k = 0; k < 3; ++k) {
    if (PyDict_GetItemWithError(globals, k_names[k]) != nullptr) return false;  // shadowed
    PyObject* b = PyDict_GetItemWithError(builtins, k_names[k]);
    const bool original = k == 2 ? b == reinterpret_cast<PyObject*>(&PySuper_Type)
                                 : IsOriginalBuiltin(b, k == 0 ? "isinstance" : "getattr");
    if (!original) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

// type(torch.nn.Parameter).__instancecheck__ is torch's own: its code compared once per
// function and code object (a "no" is remembered too), its environment once per call.
bool TorchParameterCheck(PyObject* parameter) {
  static PyObject* const name = InternedName("__instancecheck__");
  static PyObject* known = nullptr;       // the function last judged (held)
  static PyObject* known_code = nullptr;  // and its code object then (held)
  static bool same_code = false;
  static uint64_t environment_call = 0;   // the call whose environment check passed
  PyObject* check = _PyType_Lookup(Py_TYPE(parameter), name);
  if (check == nullptr || !PyFunction_Check(check)) return false;
  if (check != known || PyFunction_GET_CODE(check) != known_code) {
    Py_XDECREF(known);
    Py_XDECREF(known_code);
    known = check;
    known_code = PyFunction_GET_CODE(check);
    Py_INCREF(known);
    Py_INCREF(known_code);
    same_code = SameCodeAsTorchCheck(check);
    environment_call = 0;
  }
  if (!same_code) return false;
  if (environment_call == g_call) return true;
  // Unchanged since the last check: its globals and builtins dicts, its `super()` cell.
  static DictStamp globals_stamp, builtins_stamp;
  static PyObject* cell = nullptr;  // borrowed: compared by identity only
  static PyObject* for_parameter = nullptr;  // the class it was checked for (borrowed; Torch() holds it)
  PyObject* closure = PyFunction_GetClosure(check);
  PyObject* cell_now = closure != nullptr && PyTuple_Check(closure) && PyTuple_GET_SIZE(closure) == 1
                           ? PyCell_GET(PyTuple_GET_ITEM(closure, 0)) : nullptr;
  PyObject* builtins = reinterpret_cast<PyFunctionObject*>(check)->func_builtins;
  if (environment_call != 0 && cell_now == cell && parameter == for_parameter &&
      globals_stamp.SameDict(PyFunction_GetGlobals(check)) &&
      builtins_stamp.SameDict(builtins)) {
    environment_call = g_call;
    return true;
  }
  environment_call = 0;
  if (!TorchCheckEnvironment(check, reinterpret_cast<PyObject*>(Py_TYPE(parameter)), parameter)) return false;
  globals_stamp = DictStamp::OfDict(PyFunction_GetGlobals(check));
  builtins_stamp = DictStamp::OfDict(builtins);
  cell = cell_now;
  for_parameter = parameter;
  environment_call = g_call;
  return true;
}
#endif

// isinstance(value, cls) for a class whose instance check is type's own, from the types:
// 1, 0, or -1 when the value's __class__ may not be its type.
int FromTypes(py::handle value, PyObject* cls) {
#ifdef GUARDPOLICY_CPYTHON_TYPE_LOOKUP
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

// `module`.`name` as its dict holds it (borrowed), or nullptr.
static PyObject* ModuleEntry(PyObject* module, PyObject* name) {
  if (module == nullptr || !PyModule_Check(module)) return nullptr;
  return PyDict_GetItemWithError(PyModule_GetDict(module), name);
}

// The classes of TorchKind.
struct TorchTypes {
  PyObject* tensor = nullptr;
  PyObject* parameter = nullptr;
  PyObject* module = nullptr;
};

static const TorchTypes& Torch() {
  // Checked once per call (sys.modules["torch"].Tensor, .nn.Parameter, .nn.Module, by dict
  // lookups): isinstance looks `torch.nn.Parameter` up when it runs.
  static TorchTypes types;
  static uint64_t read_in_call = 0;
  static DictStamp torch_stamp, nn_stamp;  // the modules' dicts when last read
  static PyObject* torch_module = nullptr;  // (held)
  if (types.tensor != nullptr && read_in_call == g_call) return types;
  static PyObject* const k_torch = InternedName("torch");
  static PyObject* const k_nn = InternedName("nn");
  static PyObject* const k_tensor = InternedName("Tensor");
  static PyObject* const k_parameter = InternedName("Parameter");
  static PyObject* const k_module = InternedName("Module");
  static DictStamp modules_stamp;  // sys.modules when torch was last found there
  if (types.tensor != nullptr && modules_stamp.SameDict(PyImport_GetModuleDict()) && torch_stamp.Same(torch_module) &&
      nn_stamp.dict != nullptr && nn_stamp.SameDict(nn_stamp.dict)) {
    read_in_call = g_call;  // no import since, and nothing in torch's or torch.nn's dict changed
    return types;
  }
  PyObject* torch = PyImport_GetModule(k_torch);  // new reference, or nullptr when not imported
  if (torch == nullptr && !PyErr_Occurred()) torch = PyImport_Import(k_torch);
  if (torch == nullptr) throw py::error_already_set();
  py::object hold = py::reinterpret_steal<py::object>(torch);
  PyObject* nn = ModuleEntry(torch, k_nn);
  if (types.tensor != nullptr && torch == torch_module && torch_stamp.Same(torch) && nn_stamp.Same(nn)) {
    read_in_call = g_call;  // nothing torch's or torch.nn's dict holds has changed
    return types;
  }
  PyObject* fresh[3] = {ModuleEntry(torch, k_tensor), ModuleEntry(nn, k_parameter), ModuleEntry(nn, k_module)};
  if (fresh[0] == nullptr || fresh[1] == nullptr || fresh[2] == nullptr) {  // not plain module entries
    PyErr_Clear();
    py::object nn_attr = hold.attr("nn");
    fresh[0] = py::object(hold.attr("Tensor")).release().ptr();
    fresh[1] = py::object(nn_attr.attr("Parameter")).release().ptr();
    fresh[2] = py::object(nn_attr.attr("Module")).release().ptr();
  } else {
    for (PyObject* f : fresh) Py_INCREF(f);
  }
  Py_XDECREF(types.tensor);
  Py_XDECREF(types.parameter);
  Py_XDECREF(types.module);
  types = TorchTypes{fresh[0], fresh[1], fresh[2]};
  read_in_call = g_call;
  Py_INCREF(torch);
  Py_XDECREF(torch_module);
  torch_module = torch;
  torch_stamp = DictStamp::Of(torch);
  nn_stamp = DictStamp::Of(nn);
  modules_stamp = DictStamp::OfDict(PyImport_GetModuleDict());
  return types;
}

void BeginCall() { ++g_call; }

static PyObject* TorchClass(TorchKind kind) {
  const TorchTypes& t = Torch();
  return kind == TorchKind::kTensor ? t.tensor : kind == TorchKind::kParameter ? t.parameter : t.module;
}

// isinstance(value, torch.nn.Parameter) from the types (and torch's own check), or -1.
static int ParameterFromTypes(py::handle value) {
  const TorchTypes& t = Torch();
  if (Py_TYPE(value.ptr()) == reinterpret_cast<PyTypeObject*>(t.parameter)) return 1;  // as isinstance
#ifdef GUARDPOLICY_CPYTHON_TYPE_LOOKUP
  if (g_shortcuts && PlainInstanceCheck(t.tensor) && DefaultClass(value) && TorchParameterCheck(t.parameter)) {
    if (!IsSubtype(value, t.tensor)) return 0;
    // torch: `isinstance(instance, torch.Tensor) and getattr(instance, "_is_param", False)`,
    // else type's check, which a non-Parameter type with its own __class__ fails.
    static PyObject* const is_param = InternedName("_is_param");
    PyObject* flag = nullptr;
    const int found = LookupOptionalAttr(value.ptr(), is_param, &flag);
    if (found < 0) throw py::error_already_set();
    // A Parameter subtype is one either way (torch's check ends in type's), once the
    // `getattr` it runs first has not raised.
    const bool subtype = IsSubtype(value, t.parameter);
    if (found == 0) return subtype ? 1 : 0;
    const int truth = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (truth < 0) throw py::error_already_set();
    return truth == 1 || subtype ? 1 : 0;
  }
#endif
  return -1;
}

int IsInstanceFromTypes(py::handle value, TorchKind kind) {
  return kind == TorchKind::kParameter ? ParameterFromTypes(value) : FromTypes(value, TorchClass(kind));
}

bool CallIsInstance(py::handle value, TorchKind kind) { return SlowIsInstance(value, TorchClass(kind)); }

void SetTypeCheckShortcuts(bool enabled) { g_shortcuts = enabled; }

}  // namespace guardpolicy::python
