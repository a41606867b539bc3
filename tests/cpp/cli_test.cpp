// cli_test.cpp: `guardpolicy lint` output format and exit codes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

struct CliResult {
  int rc;
  std::string out, err;
};

CliResult RunCli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int rc = cli::Run(args, out, err, testing::kDataDir);
  return {rc, out.str(), err.str()};
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, LintCleanStdPoliciesExitZero) {
  auto r = RunCli({"lint", testing::kDataDir + "/std/skip_guard_on_globals.gpol",
                   testing::kDataDir + "/std/keep_portable_guards.gpol"});
  EXPECT_EQ(r.rc, cli::kExitClean) << r.err;
  EXPECT_EQ(r.err, "");
  // Risk warnings are printed but do not fail the lint.
  auto w = RunCli({"lint", testing::kDataDir + "/std/skip_all_guards.gpol"});
  EXPECT_EQ(w.rc, cli::kExitClean) << w.err;
  EXPECT_NE(w.err.find("warning[GP3009]: policy `skip_all_guards` drops every guard"), std::string::npos) << w.err;
}

TEST(Cli, LintFindingsPrintLocationSourceLineAndCaret) {
  const std::string path = WriteTemp("bad.gpol", "guardpolicy 1\nunsafe policy p {\n  drop when nmae == \"x\"\n}\n");
  auto r = RunCli({"lint", path});
  EXPECT_EQ(r.rc, cli::kExitFindings);
  EXPECT_EQ(r.err, path + ":3:13: error[GP2001]: unknown field `nmae`\n"
                           "  3 |   drop when nmae == \"x\"\n"
                           "    |             ^^^^\n"
                           "  = help: did you mean `name`?\n");
}

TEST(Cli, WarningsPassUnlessWerror) {
  const std::string path = WriteTemp("warn.gpol", "guardpolicy 1\nunsafe policy p { keep when is_global }\n");
  EXPECT_EQ(RunCli({"lint", path}).rc, cli::kExitClean);
  EXPECT_EQ(RunCli({"lint", "--werror", path}).rc, cli::kExitFindings);
}

TEST(Cli, UsageAndIoErrorsExitTwo) {
  EXPECT_EQ(RunCli({}).rc, cli::kExitUsage);
  EXPECT_EQ(RunCli({"lint"}).rc, cli::kExitUsage);
  EXPECT_EQ(RunCli({"frobnicate"}).rc, cli::kExitUsage);
  auto missing = RunCli({"lint", "/nonexistent/x.gpol"});
  EXPECT_EQ(missing.rc, cli::kExitUsage);
  EXPECT_NE(missing.err.find("cannot read `/nonexistent/x.gpol`: No such file or directory"), std::string::npos)
      << missing.err;
  auto dir = RunCli({"lint", ::testing::TempDir()});
  EXPECT_EQ(dir.rc, cli::kExitUsage);
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
}

TEST(Cli, DisasmListsInstructionsWithRuleSources) {
  auto r = RunCli({"disasm", testing::kDataDir + "/std/skip_guard_on_globals.gpol"});
  EXPECT_EQ(r.rc, cli::kExitClean) << r.err;
  EXPECT_NE(r.out.find("BRANCH_FIELD    is_global false -> 2"), std::string::npos) << r.out;
  auto o0 = RunCli({"disasm", "-O0", testing::kDataDir + "/std/skip_guard_on_globals.gpol"});
  EXPECT_NE(o0.out.find("LOAD_FIELD      0 (is_global)"), std::string::npos) << o0.out;
  EXPECT_NE(r.out.find("drop rule 0 (skip_guard_on_globals at "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

TEST(CliTest, RunsTestBlocksAndCountsFailures) {
  const std::string ok = (std::filesystem::path(testing::kDataDir).parent_path() / "tests/corpus/accept/serving.gpol").string();
  auto good = RunCli({"test", ok});
  EXPECT_EQ(good.rc, cli::kExitClean) << good.out << good.err;
  EXPECT_NE(good.out.find("serving.gpol:17:3: PASS: policy `serving` keep\n"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("\n4 passed, 0 failed\n"), std::string::npos) << good.out;
  const std::string path = WriteTemp("t.gpol",
      "guardpolicy 1\nunsafe policy p { drop when is_global }\n"
      "test p {\n  expect drop { is_global: true }\n  expect drop { is_global: false }\n}\n");
  auto bad = RunCli({"test", path});
  EXPECT_EQ(bad.rc, cli::kExitFindings);
  EXPECT_EQ(bad.out, path + ":4:3: PASS: policy `p` drop\n" + path +
                        ":5:3: FAIL: policy `p` decided keep by the default at " + path +
                        ":2, expected drop\n1 passed, 1 failed\n");
}

}  // namespace
}  // namespace guardpolicy
