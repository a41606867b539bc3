// files.cpp: write_file, check_output_path, read_snapshot_file (see files.h).
#include "files.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "guardpolicy/file_io.h"
#include "guardpolicy/snapshot.h"

namespace py = pybind11;

namespace guardpolicy::python {
namespace {

std::vector<std::string> Paths(const std::vector<py::bytes>& raw) {
  std::vector<std::string> out;
  for (const py::bytes& b : raw) out.emplace_back(b);
  return out;
}

// OSError(errno, why, path): Python picks the subclass (PermissionError for EACCES,
// IsADirectoryError, FileExistsError, ...) as it does for the OS's own errors.
[[noreturn]] void RaiseOsError(int err_no, const std::string& why, const std::string& path) {
  py::object filename = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
  if (!filename) throw py::error_already_set();
  PyErr_SetObject(PyExc_OSError, py::make_tuple(err_no, why, filename).ptr());
  throw py::error_already_set();
}

void WriteFile(const py::bytes& raw_path, const py::bytes& raw_data, const std::vector<py::bytes>& raw_inputs) {
  const std::string path = raw_path, data = raw_data;
  const std::vector<std::string> inputs = Paths(raw_inputs);
  WriteResult r;
  {
    py::gil_scoped_release release;
    r = WriteFileReplacing(path, data, inputs);
  }
  if (!r.ok()) RaiseOsError(r.err_no, r.error, path);
}

void CheckOutput(const py::bytes& raw_path, const std::vector<py::bytes>& raw_inputs) {
  const std::string path = raw_path;
  const WriteResult r = CheckOutputPath(path, Paths(raw_inputs));
  if (!r.ok()) RaiseOsError(r.err_no, r.error, path);
}

py::bytes ReadSnapshot(const py::bytes& raw_path) {
  const std::string path = raw_path;
  ReadResult r;
  {
    py::gil_scoped_release release;
    r = ReadSnapshotFile(path);
  }
  if (!r.error.empty()) RaiseOsError(r.err_no, r.error, path);
  return py::bytes(r.text);
}

}  // namespace

void BindFiles(py::module_& m) {
  m.def("write_file", &WriteFile, py::arg("path"), py::arg("data"), py::arg("inputs"),
        "replaces `path` by `data` atomically (file_io.h); raises OSError when refused or failed");
  m.def("check_output_path", &CheckOutput, py::arg("path"), py::arg("inputs"),
        "raises the OSError write_file would raise for `path` before writing anything");
  m.def("read_snapshot_file", &ReadSnapshot, py::arg("path"),
        "the JSON bytes of a snapshot file (inflated from gzip), capped; raises OSError");
}

}  // namespace guardpolicy::python
