// known_properties.cpp: see known_properties.h.
#include "known_properties.h"

#include "fast_attr.h"

#include <pybind11/eval.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace guardpolicy::python {
namespace py = pybind11;
namespace {

struct Known {
  PyTypeObject* type = nullptr;  // a reference is held while remembered
  unsigned int version = 0;
  PyObject* fget = nullptr;  // the recognized getter and its code then (held), or nullptr
  PyObject* code = nullptr;
};

// The getter still runs the code it was recognized with (assigning `__code__` does not
// change the type's version tag).
bool SameCodeObject(PyObject* fget, PyObject* code) {
  return fget == nullptr || PyFunction_GET_CODE(fget) == code;
}

// The code object of `def f(self): return <body>`, compiled once per body (held).
py::object ReferenceCode(const std::string& body) {
  static auto* compiled = new std::unordered_map<std::string, PyObject*>();  // lives with the interpreter
  if (auto it = compiled->find(body); it != compiled->end()) return py::reinterpret_borrow<py::object>(it->second);
  py::dict scope;
  const std::string text = "def f(self):\n    return " + body + "\n";
  py::exec(text.c_str(), scope);
  py::object code = scope["f"].attr("__code__");
  if (compiled->size() < 256) compiled->emplace(body, py::object(code).release().ptr());
  return code;
}

// The getter of property `type`.`name` (a plain function without a closure), or None:
// `type`'s attribute lookup is object's (no `__getattribute__` of its own, so the property,
// a data descriptor, answers) and the descriptor is exactly a `property` (a subclass may
// override __get__).
py::object Getter(PyTypeObject* type, PyObject* name) {
  if (!DataDescriptorsWin(type)) return py::none();
  PyObject* descr = _PyType_Lookup(type, name);
  if (descr == nullptr || !Py_IS_TYPE(descr, &PyProperty_Type)) return py::none();
  py::object fget = py::reinterpret_borrow<py::object>(descr).attr("fget");
  if (!PyFunction_Check(fget.ptr()) || PyFunction_GetClosure(fget.ptr()) != nullptr) return py::none();
  return fget;
}

// `fget`'s code is the reference's (what it executes, on which names and constants).
bool SameCode(const py::object& fget, const py::object& ref) {
  py::object code = fget.attr("__code__");
  for (const char* attr : {"co_code", "co_names", "co_consts", "co_argcount", "co_kwonlyargcount"}) {
    if (!code.attr(attr).equal(ref.attr(attr))) return false;
  }
  return true;
}

// The getter of `type`.`name` when it is `return self.<first>.<second>`, or None.
py::object Check(PyTypeObject* type, const char* name, const char* first, const char* second) {
  try {
    py::object fget = Getter(type, py::str(name).ptr());
    if (!fget.is_none() && SameCode(fget, ReferenceCode(std::string("self.") + first + "." + second))) return fget;
  } catch (py::error_already_set&) {
    // cleared by the handler's destructor: not recognized
  }
  return py::none();
}

// A getter `return G.A` resolved: valid while every check in Valid holds.
struct Constant {
  PyTypeObject* type = nullptr;  // the property's owner as looked up (held)
  unsigned int version = 0;
  PyObject* globals = nullptr;   // the getter's module globals (held)
  DictStamp globals_stamp;       // ...as they were when G was looked up
  PyObject* global_name = nullptr;  // G (held)
  PyTypeObject* cls = nullptr;   // what G named (held)
  unsigned int cls_version = 0, meta_version = 0;
  PyObject* value = nullptr;     // G.A (held); nullptr: the property is not such a getter
  PyObject* fget = nullptr;      // the getter and its code then (held)
  PyObject* code = nullptr;
};

bool Valid(const Constant& c) {
  if (c.value == nullptr) return true;  // a remembered "no"
  if (!SameCodeObject(c.fget, c.code)) return false;
  if (!(c.cls->tp_version_tag == c.cls_version && Py_TYPE(c.cls)->tp_version_tag == c.meta_version &&
        c.cls_version != 0 && c.meta_version != 0)) {
    return false;
  }
  if (c.globals_stamp.SameDict(c.globals)) return true;  // the globals have not changed at all
  PyObject* bound = PyDict_GetItemWithError(c.globals, c.global_name);
  if (bound == nullptr) PyErr_Clear();
  return bound == reinterpret_cast<PyObject*>(c.cls);
}

Constant Resolve(PyTypeObject* type, PyObject* name) {
  Constant c;
  c.type = type;
  (void)_PyType_Lookup(type, name);  // assigns the version tag recorded next
  c.version = type->tp_version_tag;
  try {
    py::object fget = Getter(type, name);
    if (fget.is_none()) return c;
    py::tuple names = fget.attr("__code__").attr("co_names");
    if (names.size() != 2) return c;
    const std::string g = py::str(names[0]), a = py::str(names[1]);
    if (!SameCode(fget, ReferenceCode(g + "." + a))) return c;
    py::object globals = fget.attr("__globals__");
    // An exact dict: LOAD_GLOBAL honours __getitem__ on a dict subclass.
    PyObject* bound = PyDict_CheckExact(globals.ptr()) ? PyDict_GetItemWithError(globals.ptr(), names[0].ptr()) : nullptr;
    if (bound == nullptr || !PyType_Check(bound)) return c;
    auto* cls = reinterpret_cast<PyTypeObject*>(bound);
    PyTypeObject* meta = Py_TYPE(cls);
    // The metaclass looks attributes up as type does (a __getattr__ runs only on a miss).
    static PyObject* const getattribute = PyUnicode_InternFromString("__getattribute__");
    if (_PyType_Lookup(meta, getattribute) != _PyType_Lookup(&PyType_Type, getattribute)) return c;
    PyObject* meta_attr = _PyType_Lookup(meta, names[1].ptr());
    if (meta_attr != nullptr && Py_TYPE(meta_attr)->tp_descr_set != nullptr) return c;
    PyObject* value = _PyType_Lookup(cls, names[1].ptr());
    if (value == nullptr || Py_TYPE(value)->tp_descr_get != nullptr) return c;
    c.globals = py::object(globals).release().ptr();
    c.globals_stamp = DictStamp::OfDict(c.globals);
    c.global_name = py::object(names[0]).release().ptr();
    Py_INCREF(bound);
    c.cls = cls;
    c.cls_version = cls->tp_version_tag;
    c.meta_version = meta->tp_version_tag;
    Py_INCREF(value);
    c.value = value;
    c.code = PyFunction_GET_CODE(fget.ptr());
    Py_INCREF(c.code);
    c.fget = fget.release().ptr();
  } catch (py::error_already_set&) {
  }
  return c;
}

void Release(Constant& c) {
  Py_XDECREF(reinterpret_cast<PyObject*>(c.type));
  Py_XDECREF(c.globals);
  Py_XDECREF(c.global_name);
  Py_XDECREF(reinterpret_cast<PyObject*>(c.cls));
  Py_XDECREF(c.value);
  Py_XDECREF(c.fget);
  Py_XDECREF(c.code);
  c = Constant{};
}

}  // namespace

bool IsAttributeChainProperty(PyTypeObject* type, const char* name, const char* first, const char* second) {
#ifdef GUARDPOLICY_CPYTHON_TYPE_LOOKUP
  static Known k;
  if (k.type == type && k.version == type->tp_version_tag && type->tp_version_tag != 0 &&
      SameCodeObject(k.fget, k.code)) {
    return k.fget != nullptr;
  }
  py::object fget = Check(type, name, first, second);
  Py_XDECREF(reinterpret_cast<PyObject*>(k.type));
  Py_XDECREF(k.fget);
  Py_XDECREF(k.code);
  Py_INCREF(type);
  k = Known{type, type->tp_version_tag, nullptr, nullptr};
  if (!fget.is_none()) {
    k.fget = fget.release().ptr();
    k.code = PyFunction_GET_CODE(k.fget);
    Py_INCREF(k.code);
  }
  return k.fget != nullptr;
#else
  (void)type, (void)name, (void)first, (void)second;
  return false;
#endif
}

PyObject* ConstantPropertyValue(PyTypeObject* type, PyObject* name) {
#ifdef GUARDPOLICY_CPYTHON_TYPE_LOOKUP
  // One name per process in practice ("guard_source"), and a few dozen source types: one
  // entry per type (the type is held, so its address stays its own), forgotten past kMax.
  constexpr size_t kMax = 512;
  static auto* table = new std::unordered_map<PyTypeObject*, Constant>();  // lives with the interpreter
  static PyObject* table_name = nullptr;
  if (table_name != name || table->size() >= kMax) {  // another name, or too many types: start over
    for (auto& [t, c] : *table) Release(c);
    table->clear();
    table_name = name;
  }
  auto [it, inserted] = table->try_emplace(type);
  Constant& c = it->second;
  if (!inserted && c.version == type->tp_version_tag && type->tp_version_tag != 0 && Valid(c)) return c.value;
  Release(c);
  c = Resolve(type, name);
  Py_INCREF(type);
  return c.value != nullptr && Valid(c) ? c.value : nullptr;
#else
  (void)type, (void)name;
  return nullptr;
#endif
}

}  // namespace guardpolicy::python
