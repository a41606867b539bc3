// python_module.cpp: the pybind11 module guardpolicy._cli, the `guardpolicy` command line
// (tools/cli) inside the Python process, for `python -m guardpolicy` (guardpolicy/cli.py).
//
// A module of its own so that guardpolicy._core does not link the command line: the CLI sits
// above the core, beside the bindings (docs/design.md, "Layers"). _core.run_cli, its old name,
// calls this one. Built with the bindings (bindings/CMakeLists.txt), which find pybind11.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace py = pybind11;

namespace {

int RunCli(const std::vector<py::bytes>& raw_args, const py::bytes& raw_data_dir) {
  std::vector<std::string> args;
  for (const py::bytes& a : raw_args) args.push_back(std::string(a));
  const std::string data_dir = raw_data_dir;
  std::ostringstream out, err;
  const int rc = guardpolicy::cli::Run(args, out, err, data_dir);
  py::module_ sys = py::module_::import("sys");
  // Output may hold file names that are not UTF-8: decode like the file system does.
  auto decode = [](const std::string& s) {
    return py::reinterpret_steal<py::object>(
        PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size())));
  };
  sys.attr("stdout").attr("write")(decode(out.str()));
  sys.attr("stderr").attr("write")(decode(err.str()));
  return rc;
}

}  // namespace

PYBIND11_MODULE(_cli, m) {
  m.doc() = "the guardpolicy command line (tools/cli) in this process, for `python -m guardpolicy`";
  m.def("run_cli", &RunCli, py::arg("args"), py::arg("data_dir"),
        "Runs the C++ `guardpolicy` command line with `args` (without the program name), writing "
        "to sys.stdout/sys.stderr; returns the exit code (0, 1 or 2).");
}
