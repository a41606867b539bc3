// py_values.h: the core's values as Python objects, and back: text that may name files,
// policy parameters (Literal) and the diagnostics a failed load raises (PolicyError).
//
// Shared by the bindings of guardpolicy._core (_core.cpp, plugins.cpp, py_policy.cpp).
// Errors: Python exceptions propagate as pybind11::error_already_set (or a pybind11
// exception type that pybind11 turns into one).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "guardpolicy/diagnostic.h"
#include "guardpolicy/literal.h"

namespace guardpolicy::python {

// Text that may hold file names which are not UTF-8, decoded like the file system does.
pybind11::object FsStr(const std::string& s);

// A parameter's value from Python: bool, int (64-bit) or str, else TypeError (ValueError for
// an int out of range); `name` names the parameter in the message.
Literal LiteralFromPython(const std::string& name, pybind11::handle v);
pybind11::object LiteralToPython(const Literal& lit);
// {name: value} of a load or get_filter call, each read by LiteralFromPython.
ParamValues ParamValuesFromPython(const pybind11::dict& params);

// One diagnostic as the dict guardpolicy.errors.PolicyError holds (severity, code, message,
// file, line, column, end_line, end_column, help, rendered).
pybind11::dict DiagnosticToDict(const Diagnostic& d);
// Raises guardpolicy.errors.PolicyError with every diagnostic of `diags`.
[[noreturn]] void RaisePolicyError(const Diagnostics& diags);

}  // namespace guardpolicy::python
