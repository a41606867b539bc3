// cli.cpp: argument parsing (CLI11) and dispatch to one file per subcommand.
#include "cli.h"

#include <cstdlib>
#include <filesystem>
#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "context.h"

namespace guardpolicy::cli {
namespace {

// --data-dir, else $GUARDPOLICY_DATA_DIR, else <prefix>/share/guardpolicy beside the
// executable (<prefix>/bin/guardpolicy: `cmake --install`, or the wheel, whose data go to
// the environment's share/guardpolicy). Only the executable in the build tree falls back
// to the source tree's policies/: an installed one never reads a checkout.
std::string DefaultDataDir(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("GUARDPOLICY_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return GUARDPOLICY_SOURCE_DATA_DIR;
  const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "guardpolicy";
  if (std::filesystem::is_regular_file(installed / "schema" / "guard_entry.yaml", ec)) return installed.string();
  if (exe.parent_path() == std::filesystem::path(GUARDPOLICY_BUILD_TREE_BIN_DIR)) return GUARDPOLICY_SOURCE_DATA_DIR;
  return installed.string();  // missing: the error names where the data should be
}

// Subcommands implemented in Python (bindings/python/guardpolicy/cli.py: PYTHON_TOOLS), with
// their one-line help; this executable only points at them.
constexpr std::pair<const char*, const char*> kPythonTools[] = {
    {"capture", "record the guards torch.compile offers while a script runs"},
    {"bench", "time eager, no filter, each policy and torch's filters on models"},
    {"audit", "change the state each dropped guard protects: dangerous, caught or harmless"},
    {"suggest", "audit a model's guards and write a policy dropping only the harmless ones"},
    {"recompiles", "name the guard a recompile storm fails on and write a fix proven against eager"},
    {"coverage", "say which calls warm-up covered and which guard fails for the others"},
    {"demo", "bench on the two demo models (what `make demo` runs)"},
    {"doctor", "say which features work on the installed torch, and what each other one needs"},
};

std::string PythonToolsHelp() {
  std::string text = "Python subcommands (need torch; run them as `python -m guardpolicy SUBCOMMAND`):\n";
  for (const auto& [name, help] : kPythonTools) text += fmt::format("  {:<28}{}\n", name, help);
  return text;
}

// The first word that is not an option (or --data-dir's value): the subcommand, or "".
std::string FirstSubcommand(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--data-dir") {
      ++i;
    } else if (args[i].rfind('-', 0) != 0) {
      return args[i];
    }
  }
  return {};
}

}  // namespace

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        const std::string& data_dir) {
  const std::string sub = FirstSubcommand(args);
  for (const auto& [name, help] : kPythonTools) {
    if (sub == name) {
      err << fmt::format("guardpolicy: `{0}` is a Python tool (it needs torch): run `python -m guardpolicy {0}`\n", name);
      return kExitUsage;
    }
  }
  CLI::App app{"guardpolicy: guard-filter policies for torch.compile", "guardpolicy"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("guardpolicy ") + kVersion);
  app.fallthrough();  // --data-dir may also follow the subcommand
  Context ctx;
  ctx.out = &out;
  ctx.err = &err;
  std::string data_opt;
  app.add_option("--data-dir", data_opt, "directory with schema/ and std/ (default: built-in)");

  std::vector<std::string> lint_files;
  bool werror = false;
  CLI::App* lint = app.add_subcommand("lint", "parse and check policy files");
  lint->add_option("files", lint_files, "policy files")->required();
  lint->add_flag("--werror", werror, "treat warnings as findings");
  lint->add_option("--schema", ctx.schema_path, "schema YAML (default: the built-in schema)");
  std::string format = "text";
  lint->add_option("--format", format, "output format")->check(CLI::IsMember({"text", "json", "sarif"}));

  std::string disasm_file, disasm_policy;
  CLI::App* disasm = app.add_subcommand("disasm", "print the bytecode of a policy or a .gpolc");
  disasm->add_option("file", disasm_file, "policy file or .gpolc")->required();
  disasm->add_option("--policy", disasm_policy, "policy name when the file has several");
  int opt_level = 1;
  disasm->add_option("-O", opt_level, "optimization level: -O0 none, -O1 every pass (default)")
      ->check(CLI::Range(0, 1));

  std::string compile_file, compile_policy, compile_out;
  CLI::App* compile = app.add_subcommand("compile", "compile a policy to a .gpolc artifact");
  compile->add_option("file", compile_file, "policy file")->required();
  compile->add_option("-o,--output", compile_out, "output path (default: FILE.gpolc)")
      ->check([](const std::string& v) { return v.empty() ? std::string("the output path is empty") : std::string(); });
  compile->add_option("--policy", compile_policy, "policy name when the file has several");
  compile->add_option("-O", opt_level, "optimization level: -O0 none, -O1 every pass (default)")
      ->check(CLI::Range(0, 1));

  std::vector<std::string> test_files;
  CLI::App* test = app.add_subcommand("test", "run the `test` blocks of policy files");
  test->add_option("files", test_files, "policy files")->required();

  std::vector<std::string> fmt_files;
  bool fmt_check = false;
  CLI::App* fmt_cmd = app.add_subcommand("fmt", "rewrite policy files in the canonical layout");
  fmt_cmd->add_option("files", fmt_files, "policy files")->required();
  fmt_cmd->add_flag("--check", fmt_check, "change nothing; exit 1 if a file is not formatted");
  fmt_cmd->add_option("--schema", ctx.schema_path, "schema YAML (default: the built-in schema)");

  std::string check_file, check_policy, check_guards;
  bool check_explain = false;
  CLI::App* check = app.add_subcommand("check", "run a policy on guards recorded from a model");
  check->add_option("policy_file", check_file, "policy file or .gpolc")->required();
  check->add_option("--guards", check_guards, "snapshot from `python -m guardpolicy capture`")->required();
  check->add_option("--policy", check_policy, "policy name when the file has several");
  check->add_flag("--explain", check_explain, "print each guard's decision and deciding rule");

  CLI::App* filters = app.add_subcommand("filters", "list every filter by name: built-in, std, plugin");

  // Plugins extend the schema (fields, functions, filters) for every command that checks.
  for (CLI::App* command : {lint, fmt_cmd, disasm, compile, test, check, filters}) {
    command->add_option("--plugin", ctx.plugins, "plugin shared library to load (repeatable)")
        ->allow_extra_args(false);  // one path per --plugin; later words are files
  }

  std::vector<std::string> argv_rev(args.rbegin(), args.rend());
  try {
    app.parse(argv_rev);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    if (app.get_subcommands().empty()) out << PythonToolsHelp();  // the top level's help only
    return kExitClean;
  } catch (const CLI::CallForVersion&) {
    out << "guardpolicy " << kVersion << "\n";
    return kExitClean;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (!args.empty() && args[0].rfind('-', 0) != 0 && app.get_subcommands().empty()) {
      what = "unknown subcommand `" + args[0] + "`";  // CLI11 says "A subcommand is required"
      std::vector<std::string> names;
      for (const CLI::App* s : app.get_subcommands({})) names.push_back(s->get_name());
      for (const auto& [name, help] : kPythonTools) names.emplace_back(name);
      if (const std::string best = ClosestMatch(args[0], names); !best.empty()) {
        what += fmt::format(": did you mean `{}`?", best);
      }
    }
    err << "guardpolicy: " << what << "\n" << "run `guardpolicy --help` for usage\n";
    return kExitUsage;
  }
  ctx.data_dir = DefaultDataDir(data_opt.empty() ? data_dir : data_opt);
  ctx.opt_level = opt_level;
  try {
    if (lint->parsed()) return RunLint(ctx, lint_files, werror, format);
    if (disasm->parsed()) return RunDisasm(ctx, disasm_file, disasm_policy);
    if (compile->parsed()) return RunCompile(ctx, compile_file, compile_policy, compile_out);
    if (test->parsed()) return RunTest(ctx, test_files);
    if (fmt_cmd->parsed()) return RunFmt(ctx, fmt_files, fmt_check);
    if (check->parsed()) return RunCheck(ctx, check_file, check_policy, check_guards, check_explain);
    if (filters->parsed()) return RunFilters(ctx);
  } catch (const std::exception& e) {
    err << "guardpolicy: error: " << e.what() << "\n";
    return kExitUsage;
  }
  return kExitUsage;
}

}  // namespace guardpolicy::cli
