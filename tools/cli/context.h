// context.h: what every subcommand shares: data paths, the schema, a Loader.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "guardpolicy/policy.h"

namespace guardpolicy::cli {

struct Context {
  std::string data_dir;
  std::string schema_path;  // --schema overrides data_dir/schema/guard_entry.yaml
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;

  // Loads the schema and makes a Loader over data_dir/std. Throws SchemaError.
  std::unique_ptr<Loader> MakeLoader() const;
};

// `guardpolicy lint FILE...`
int RunLint(const Context& ctx, const std::vector<std::string>& files, bool werror);
// `guardpolicy compile FILE [--policy NAME]` prints the disassembly of the compiled policy
// (`disasm` is the same listing).
int RunDisasm(const Context& ctx, const std::string& file, const std::string& policy);

// `guardpolicy test FILE...`: runs the files' `test` blocks; prints one line per failing
// expectation and "N passed, M failed".
int RunTest(const Context& ctx, const std::vector<std::string>& files);

}  // namespace guardpolicy::cli
