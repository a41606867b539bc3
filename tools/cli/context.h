// context.h: what every subcommand shares: data paths, the schema, a Loader.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "guardpolicy/policy.h"

namespace guardpolicy::cli {

struct Context {
  std::string data_dir;
  std::string schema_path;  // --schema overrides data_dir/schema/guard_entry.yaml
  int opt_level = 1;        // -O0 / -O1
  std::vector<std::string> plugins;  // --plugin PATH, loaded in order
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;

  // Loads the schema and the plugins and makes a Loader over data_dir/std. Throws
  // SchemaError or PluginError (reported as usage errors, exit 2).
  std::unique_ptr<Loader> MakeLoader() const;
};

// The project version, from CMakeLists.txt's project() (the one source: pyproject.toml reads
// it there too, and Python's guardpolicy.__version__ is _core's copy of this).
inline constexpr const char kVersion[] = GUARDPOLICY_VERSION;

// The exit code for a failed load: 2 when the input could not be read at all (GP0001 I/O,
// GP0002 too large, GP0006 refused artifact), else 1 (the policy has errors).
int ExitCodeFor(const Diagnostics& diagnostics);
// Prints `e`'s diagnostics to ctx.err and returns ExitCodeFor them.
int ReportLoadError(const Context& ctx, const PolicyError& e);

// `guardpolicy lint [--format text|json|sarif] [--werror] FILE...`: text goes to stderr,
// JSON and SARIF (all files in one document) to stdout.
int RunLint(const Context& ctx, const std::vector<std::string>& files, bool werror,
            const std::string& format);
// `guardpolicy disasm FILE|OUT.gpolc [--policy NAME] [-O0|-O1]`: the bytecode listing.
int RunDisasm(const Context& ctx, const std::string& file, const std::string& policy);
// `guardpolicy compile FILE [-o OUT.gpolc] [--policy NAME] [-O0|-O1]`: writes the artifact
// (default: FILE with the extension .gpolc) through WriteFileReplacing (file_io.h): never
// over the input, a read-only file or anything but a regular file (exit 2 then).
int RunCompile(const Context& ctx, const std::string& file, const std::string& policy, std::string out);

// `guardpolicy test FILE...`: runs the files' `test` blocks; prints one line per failing
// expectation and "N passed, M failed".
int RunTest(const Context& ctx, const std::vector<std::string>& files);

// `guardpolicy fmt [--check] [--schema YAML] [--plugin PATH]... FILE...`: rewrites files in
// the canonical layout (atomically, WriteFileReplacing: a read-only file is reported, exit 2,
// and left alone); a file with errors (syntax, names, types, as `lint` finds them) is
// reported and left alone (exit 1); with --check changes nothing and exits 1 if any file
// would change.
int RunFmt(const Context& ctx, const std::vector<std::string>& files, bool check);

// `guardpolicy check POLICY --guards SNAPSHOT [--explain]`: decisions on recorded guards
// (per guard with --explain: decision, guard type, name, deciding rule), then the totals.
int RunCheck(const Context& ctx, const std::string& policy_path, const std::string& policy,
             const std::string& guards, bool explain);

// `guardpolicy filters [--plugin PATH]...`: every filter by name (builtin, std, plugin),
// one line each with its kind and parameters, then its doc indented.
int RunFilters(const Context& ctx);

}  // namespace guardpolicy::cli
