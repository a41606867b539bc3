// Runs the guardpolicy command line in-process for the C++ tests: exit code, stdout, stderr.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "test_util.h"

namespace guardpolicy::testing {

struct CliResult {
  int rc;
  std::string out, err;
};

// `guardpolicy ARGS...` against the build's data directory.
inline CliResult RunCli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int rc = cli::Run(args, out, err, kDataDir);
  return {rc, out.str(), err.str()};
}

}  // namespace guardpolicy::testing
