// py_values.cpp: text, parameter literals and diagnostics to and from Python (see py_values.h).
#include "py_values.h"

#include "guardpolicy/source.h"

namespace py = pybind11;

namespace guardpolicy::python {

py::object FsStr(const std::string& s) {
  PyObject* r = PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

Literal LiteralFromPython(const std::string& name, py::handle v) {
  Literal lit;
  if (py::isinstance<py::bool_>(v)) {
    lit.kind = Literal::Kind::kBool;
    lit.b = v.cast<bool>();
  } else if (py::isinstance<py::int_>(v)) {
    lit.kind = Literal::Kind::kInt;
    int overflow = 0;
    lit.i = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0)
      throw py::value_error("parameter `" + name + "`: integer out of the 64-bit range");
  } else if (py::isinstance<py::str>(v)) {
    lit.kind = Literal::Kind::kString;
    lit.str = v.cast<std::string>();
  } else {
    throw py::type_error("parameter `" + name + "` must be bool, int or str, not " +
                         std::string(Py_TYPE(v.ptr())->tp_name));
  }
  return lit;
}

py::object LiteralToPython(const Literal& lit) {
  switch (lit.kind) {
    case Literal::Kind::kBool: return py::bool_(lit.b);
    case Literal::Kind::kInt: return py::int_(lit.i);
    case Literal::Kind::kString: return py::str(lit.str);
  }
  return py::none();
}

ParamValues ParamValuesFromPython(const py::dict& params) {
  ParamValues values;
  for (auto [k, v] : params)
    values[k.cast<std::string>()] = LiteralFromPython(k.cast<std::string>(), v);
  return values;
}

py::dict DiagnosticToDict(const Diagnostic& d) {
  py::dict out;
  const LineCol start = d.range.start();
  const LineCol end = d.range.file ? d.range.file->Locate(d.range.end) : LineCol{};
  out["severity"] = SeverityName(d.severity);
  out["code"] = d.code;
  out["message"] = FsStr(d.message);
  out["file"] = d.range.file ? FsStr(d.range.file->path()) : py::object(py::none());
  out["line"] = start.line;
  out["column"] = start.col;
  out["end_line"] = end.line;
  out["end_column"] = end.col;
  out["help"] = FsStr(d.help);
  out["rendered"] = FsStr(RenderText(d));
  return out;
}

[[noreturn]] void RaisePolicyError(const Diagnostics& diags) {
  py::list items;
  for (const Diagnostic& d : diags.items()) items.append(DiagnosticToDict(d));
  py::object cls = py::module_::import("guardpolicy.errors").attr("PolicyError");
  PyErr_SetObject(cls.ptr(), cls(FsStr(RenderText(diags)), items).ptr());
  throw py::error_already_set();
}

}  // namespace guardpolicy::python
