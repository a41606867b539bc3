// cli.h: the `guardpolicy` command line, callable from main() and from Python.
//
// Exit codes (fixed): 0 clean, 1 findings (diagnostics with errors; warnings too under
// --werror), 2 usage, I/O or internal error. Output goes to `out`, diagnostics to `err`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace guardpolicy::cli {

inline constexpr int kExitClean = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;

// `args` excludes the program name. `data_dir` holds schema/guard_entry.yaml and std/;
// empty means $GUARDPOLICY_DATA_DIR, else the source tree's policies/ directory.
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        const std::string& data_dir = {});

}  // namespace guardpolicy::cli
