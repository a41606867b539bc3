// entry_extractor_mappings.cpp: EntryExtractor over mapping rows (entry_extractor.h,
// SetMappings): a field's value in a row {field name: value} of Policy.evaluate, checked
// against the field's type; an absent (or None) field reads as false, 0, "", no enum member,
// the empty set.
#include <string>

#include "entry_extractor.h"

namespace guardpolicy::python {
namespace {

// What an absent field reads as: false, 0, "", no enum member (ordinal -1), empty set.
Value AbsentValue(const Type& t) { return Value{t.kind == TypeKind::kEnum ? -1 : 0, 0, {}}; }

// A row value of the wrong Python type: a TypeError naming the field and both types, never
// pybind11's "Unable to cast Python instance ..." or CPython's "bad argument type".
[[noreturn]] void WrongRowType(const std::string& name, const char* want, py::handle item) {
  throw py::type_error("field `" + name + "` must be " + want + ", not " +
                       Py_TYPE(item.ptr())->tp_name);
}

}  // namespace

Value EntryExtractor::MappingValue(py::handle get, const std::string& name, const Type& type) {
  Value v = AbsentValue(type);
  py::object item = get(name, py::none());
  if (item.is_none()) return v;
  switch (type.kind) {
    case TypeKind::kBool: try { v = BoolValue(item.cast<bool>());
      } catch (const py::cast_error&) {
        WrongRowType(name, "a bool", item);
      }
      break;
    case TypeKind::kInt:
      try {
        v.i = item.cast<int64_t>();  // an int, or what has __index__ (numpy's)
      } catch (const py::cast_error&) {
        if (PyLong_Check(item.ptr()))
          throw py::value_error("field `" + name + "` is out of the 64-bit range");
        WrongRowType(name, "an int", item);
      }
      break;
    case TypeKind::kString:
      if (!PyUnicode_Check(item.ptr())) WrongRowType(name, "a str", item);
      v.s = View(item);
      break;
    case TypeKind::kEnum:
      if (!PyUnicode_Check(item.ptr())) WrongRowType(name, "a str (a member name)", item);
      v = EnumValue(type.enum_index, View(item));
      break;
    case TypeKind::kEnumSet: {
      if (PyUnicode_Check(item.ptr()) || !py::isinstance<py::iterable>(item)) {
        WrongRowType(name, "a list of member names", item);
      }
      py::tuple members(py::reinterpret_borrow<py::iterable>(item));
      for (py::handle m : members) {
        if (!PyUnicode_Check(m.ptr())) WrongRowType(name, "a list of member names (str)", m);
      }
      v = SetValue(type.enum_index, members);
      break;
    }
    case TypeKind::kError: break;
  }
  return v;
}

}  // namespace guardpolicy::python
