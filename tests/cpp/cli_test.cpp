// cli_test.cpp: `guardpolicy lint` output format and exit codes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli.h"
#include "cli_runner.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::CliResult;
using testing::RunCli;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, LintCleanStdPoliciesExitZero) {
  auto r = RunCli({"lint", testing::kDataDir + "/std/skip_guard_on_globals.gpol",
                   testing::kDataDir + "/std/skip_guard_on_all_nn_modules.gpol"});
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

TEST(Cli, SeveralPoliciesNeedTheCommandLinesOption) {
  // Python says `policy=...`; the command line's own spelling is --policy (issue 17, item 15).
  const std::string path = WriteTemp("two.gpol", "guardpolicy 1\npolicy a { keep when is_global }\n"
                                                 "policy b { keep when is_global }\n");
  const auto r = RunCli({"compile", path});
  EXPECT_EQ(r.rc, cli::kExitFindings);
  EXPECT_NE(r.err.find("= help: choose one with --policy NAME: `a`, `b`"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("policy=..."), std::string::npos) << r.err;
}

TEST(Cli, PythonToolsPointAtPythonM) {
  for (const std::string tool : {"capture", "bench", "audit", "suggest", "demo"}) {
    const auto r = RunCli({tool, "--help"});
    EXPECT_EQ(r.rc, cli::kExitUsage);
    EXPECT_EQ(r.err, "guardpolicy: `" + tool + "` is a Python tool (it needs torch): run `python -m guardpolicy " +
                         tool + "`\n");
  }
  const auto help = RunCli({"--help"});
  EXPECT_NE(help.out.find("Python subcommands (need torch; run them as `python -m guardpolicy SUBCOMMAND`):\n"
                          "  capture "),
            std::string::npos)
      << help.out;
}

TEST(Cli, UsageAndIoErrorsExitTwo) {
  EXPECT_EQ(RunCli({}).rc, cli::kExitUsage);
  EXPECT_NE(RunCli({"bogus"}).err.find("unknown subcommand `bogus`"), std::string::npos);
  EXPECT_EQ(RunCli({"compile", testing::kDataDir + "/std/skip_all_guards.gpol", "-o", ""}).rc, cli::kExitUsage);
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

namespace guardpolicy {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(BadInput, EmptyFileAndHeaderOnly) {
  auto empty = RunCli({"lint", WriteTemp("empty.gpol", "")});
  EXPECT_EQ(empty.rc, cli::kExitFindings);
  EXPECT_NE(empty.err.find("error[GP1001]"), std::string::npos) << empty.err;
  auto header = RunCli({"lint", WriteTemp("header.gpol", "guardpolicy 1\n")});
  EXPECT_EQ(header.rc, cli::kExitClean) << header.err;  // a file may hold no policy
}

TEST(BadInput, TenMegabyteFileIsRefusedBeforeReading) {
  const std::string path = WriteTemp("big.gpol", std::string(10 << 20, '#'));
  auto r = RunCli({"lint", path});
  EXPECT_EQ(r.rc, cli::kExitUsage);
  EXPECT_NE(r.err.find("error[GP0002]"), std::string::npos) << r.err;
}

TEST(BadInput, AFileThatCannotBeReadIsAnIoError) {
  // /proc/self/mem is a regular file that fails every read from offset 0, even for root.
  auto r = RunCli({"lint", "/proc/self/mem"});
  EXPECT_EQ(r.rc, cli::kExitUsage);
  EXPECT_NE(r.err.find("error[GP0001]: cannot read `/proc/self/mem`"), std::string::npos) << r.err;
}

TEST(BadInput, NothingIsWrittenForBadInput) {
  const std::string bad = "guardpolicy 1\npolicy p { drop when }\n";
  const std::string path = WriteTemp("nowrite.gpol", bad);
  EXPECT_EQ(RunCli({"fmt", path}).rc, cli::kExitFindings);  // a syntax error: a finding
  EXPECT_EQ(ReadFile(path), bad);  // untouched
  for (const auto& e : std::filesystem::directory_iterator(::testing::TempDir())) {
    EXPECT_EQ(e.path().filename().string().find(".nowrite.gpol."), std::string::npos) << e.path();
  }
  const std::string out = ::testing::TempDir() + "nowrite.gpolc";
  std::filesystem::remove(out);
  EXPECT_EQ(RunCli({"compile", path, "-o", out}).rc, cli::kExitFindings);
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(BadInput, CompileRoundTripsThroughTheCli) {
  const std::string out = ::testing::TempDir() + "globals.gpolc";
  auto c = RunCli({"compile", testing::kDataDir + "/std/skip_guard_on_globals.gpol", "-o", out});
  EXPECT_EQ(c.rc, cli::kExitClean) << c.err;
  auto d = RunCli({"disasm", out});
  EXPECT_EQ(d.rc, cli::kExitClean) << d.err;
  EXPECT_NE(d.out.find("drop rule 0 (skip_guard_on_globals"), std::string::npos) << d.out;
  std::string bytes = ReadFile(out);
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(out, std::ios::binary) << bytes;
  auto bad = RunCli({"disasm", out});
  EXPECT_EQ(bad.rc, cli::kExitUsage);
  EXPECT_NE(bad.err.find("error[GP0006]"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

TEST(BadInput, FmtThroughASymlinkRewritesTheTargetAndKeepsTheLink) {
  const std::string target = WriteTemp("linked.gpol", "guardpolicy 1\npolicy   p {default keep}\n");
  const std::string link = ::testing::TempDir() + "link.gpol";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  EXPECT_EQ(RunCli({"fmt", link}).rc, cli::kExitClean);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(ReadFile(target), "guardpolicy 1\n\npolicy p {\n  default keep\n}\n");
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

// Issue 17 item 13: `fmt` reports a file with errors (a type error too) and leaves it alone.
TEST(Cli, FmtLeavesAFileWithATypeErrorAlone) {
  const std::string text = "guardpolicy 1\npolicy   p {\n  keep when name == 3\n}\n";
  const std::string path = WriteTemp("type_error.gpol", text);
  auto r = RunCli({"fmt", path});
  EXPECT_EQ(r.rc, cli::kExitFindings);
  EXPECT_NE(r.err.find("error[GP2003]"), std::string::npos) << r.err;
  std::ifstream in(path);
  std::stringstream now;
  now << in.rdbuf();
  EXPECT_EQ(now.str(), text);
  auto check = RunCli({"fmt", "--check", path});
  EXPECT_EQ(check.rc, cli::kExitFindings);
  EXPECT_EQ(check.out, "");
  // Fixed, it is formatted.
  std::ofstream(path) << "guardpolicy 1\npolicy   p {\n  keep when name == \"x\"\n}\n";
  EXPECT_EQ(RunCli({"fmt", path}).rc, cli::kExitClean);
}

// Issue 17 item 6: a .gpolc cut inside its magic, or empty, is a refused artifact (exit 2).
TEST(Cli, TruncatedArtifactIsRefusedNotReadAsSource) {
  for (const std::string& bytes :
       {std::string("GPOLC\0\r", 7), std::string("GPO"), std::string()}) {
    const std::string path = testing::TestTempPath("cut.gpolc");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    for (const char* cmd : {"disasm", "check"}) {
      std::vector<std::string> args = {cmd, path};
      if (std::string(cmd) == "check") args = {cmd, path, "--guards", path};
      auto r = RunCli(args);
      EXPECT_EQ(r.rc, cli::kExitUsage) << cmd << " " << bytes.size() << r.err;
      EXPECT_NE(r.err.find("error[GP0006]: cannot load compiled policy `" + path + "`: truncated: " +
                           std::to_string(bytes.size()) + " bytes"),
                std::string::npos)
          << r.err;
    }
  }
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

// Sibling of issue 17 item 6: a whole .gpolc given to a command that reads source is named
// for what it is (GP0006, exit 2), not reported as source with a NUL byte (GP0004).
TEST(Cli, CommandsThatReadSourceNameACompiledPolicy) {
  const std::string artifact = ::testing::TempDir() + "globals.gpolc";
  ASSERT_EQ(RunCli({"compile", testing::kDataDir + "/std/skip_guard_on_globals.gpol", "-o", artifact}).rc, 0);
  std::ifstream in(artifact, std::ios::binary);
  std::stringstream before;
  before << in.rdbuf();
  for (const char* cmd : {"lint", "test", "fmt", "compile"}) {
    auto r = RunCli({cmd, artifact});
    EXPECT_EQ(r.rc, cli::kExitUsage) << cmd;
    EXPECT_EQ(r.err, "error[GP0006]: `" + artifact + "` is a compiled policy (.gpolc), not policy source\n"
                     "  = help: lint, fmt, test and compile read the .gpol source; disasm, check and "
                     "guardpolicy.load read a .gpolc\n")
        << cmd;
  }
  std::ifstream again(artifact, std::ios::binary);
  std::stringstream after;
  after << again.rdbuf();
  EXPECT_EQ(after.str(), before.str());
}

}  // namespace
}  // namespace guardpolicy
