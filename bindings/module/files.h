// files.h: guardpolicy._core's file functions: every Python writer and the snapshot reader
// go through the C++ helpers of guardpolicy/file_io.h, as the command line does.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// Adds write_file, check_output_path and read_snapshot_file to `m`.
void BindFiles(pybind11::module_& m);

}  // namespace guardpolicy::python
