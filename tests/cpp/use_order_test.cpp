// use_order_test.cpp: `use` of a policy declared later in the file, or in another file
// (items come in any order, docs/language.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <sstream>

#include "cli.h"
#include "guardpolicy/diag_codes.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

namespace fs = std::filesystem;
using testing::Codes;
using testing::Entry;
using testing::Src;

// The reproduction of issue 17 item 1 (a segfault in the analysis of p0).
const char kForward[] =
    "guardpolicy 1\n"
    "policy p0 { use p1 }\n"
    "policy p1 { keep when is_global }\n";

Entry Global(bool is_global) {
  Entry e;
  e.Enum("guard_type", "GuardType", "ID_MATCH").Enum("guard_source", "GuardSource", is_global ? "GLOBAL" : "LOCAL");
  return e.Bool("is_global", is_global);
}

TEST(UseOrder, ForwardUseLintsCleanAndCompilesBothPolicies) {
  Loader loader = testing::MakeLoader();
  auto lint = loader.Lint(Src(kForward, "fwd.gpol"));
  EXPECT_TRUE(lint.diagnostics.empty()) << RenderText(lint.diagnostics);
  for (const char* name : {"p0", "p1"}) {
    auto p = loader.Load(Src(kForward, "fwd.gpol"), name, {});
    const Outcome o = Global(true).Run(p->program());
    EXPECT_EQ(o.decision, Decision::kKeep);
    ASSERT_EQ(o.rule, 0) << name;
    EXPECT_EQ(p->program().image().rules[0].policy, "p1");
    EXPECT_EQ(p->program().image().rules[0].line, 3);
  }
}

TEST(UseOrder, ForwardUseArgumentsAreCheckedAgainstTheParameterTypes) {
  const std::string later = "unsafe policy p1(flag: bool = false, src: GuardSource = \"LOCAL\") {\n"
                            "  drop when flag and guard_source == src\n}\n";
  Loader loader = testing::MakeLoader();
  auto ok = loader.Lint(Src("guardpolicy 1\nunsafe policy p0 { use p1(flag = true, src = \"GLOBAL\") }\n" + later));
  EXPECT_FALSE(ok.diagnostics.HasErrors()) << RenderText(ok.diagnostics);
  auto p0 = loader.Load(Src("guardpolicy 1\nunsafe policy p0 { use p1(flag = true, src = \"GLOBAL\") }\n" + later), "p0", {});
  EXPECT_EQ(Global(true).Run(p0->program()).decision, Decision::kDrop);
  EXPECT_EQ(Global(false).Run(p0->program()).decision, Decision::kKeep);

  auto bad = loader.Lint(Src("guardpolicy 1\nunsafe policy p0 { use p1(flag = 3, src = \"NOPE\") }\n" + later));
  ASSERT_EQ(testing::ErrorCodes(bad.diagnostics), (std::vector<std::string>{codes::kBadParameter, codes::kBadParameter}))
      << RenderText(bad.diagnostics);
  EXPECT_EQ(bad.diagnostics.items()[0].message, "expected a bool value, found int");
  EXPECT_EQ(bad.diagnostics.items()[0].range.ToString(), "test.gpol:2:34");
}

TEST(UseOrder, UsingAPolicyWithErrorsReportsOnlyItsErrors) {
  // The used policy comes first here: its rule is ill-typed, so the user's analysis (which
  // compiles it) does not run.
  Loader loader = testing::MakeLoader();
  for (const std::string text : {"policy p1 { keep when guard_source == NOPE }\npolicy p0 { use p1 }\n",
                                 "policy p0 { use p1 }\npolicy p1 { keep when guard_source == NOPE }\n"}) {
    auto lint = loader.Lint(Src("guardpolicy 1\n" + text));
    ASSERT_EQ(Codes(lint.diagnostics), std::vector<std::string>{codes::kUnknownEnumLiteral}) << text;
    EXPECT_EQ(lint.diagnostics.items()[0].message, "unknown GuardSource `NOPE`");
  }
}

TEST(UseOrder, DiagnosticsStayInDeclarationOrder) {
  // p1 is checked first (p0 uses it), but p0's findings are reported first.
  Loader loader = testing::MakeLoader();
  auto lint = loader.Lint(Src("guardpolicy 1\npolicy p0 { use p1\n  keep when is_global and not is_global }\n"
                              "unsafe policy p1 { keep when is_global }\n"));
  ASSERT_EQ(Codes(lint.diagnostics), (std::vector<std::string>{codes::kAlwaysFalse, codes::kUnsafeNeverDrops}))
      << RenderText(lint.diagnostics);
  EXPECT_EQ(lint.diagnostics.items()[0].range.ToString(), "test.gpol:3:13");
  EXPECT_EQ(lint.diagnostics.items()[1].range.ToString(), "test.gpol:4:15");
}

// A library directory (what --data-dir's std/ holds) whose file uses a policy declared
// later in that file.
TEST(UseOrder, UseOfAPolicyInAnotherFileThatUsesForward) {
  const fs::path dir = fs::path(::testing::TempDir()) / "use_order_std";
  fs::create_directories(dir);
  std::ofstream(dir / "lib_globals.gpol") << "guardpolicy 1\n"
                                             "unsafe policy lib_globals { use helper }\n"
                                             "unsafe policy helper { drop when is_global }\n";
  Loader loader(testing::TestSchema(), dir.string());
  const std::string text = "guardpolicy 1\nunsafe policy p { use lib_globals }\n";
  auto lint = loader.Lint(Src(text));
  EXPECT_FALSE(lint.diagnostics.HasErrors()) << RenderText(lint.diagnostics);
  auto p = loader.Load(Src(text), "p", {});
  const Outcome o = Global(true).Run(p->program());
  EXPECT_EQ(o.decision, Decision::kDrop);
  ASSERT_EQ(o.rule, 0);
  EXPECT_EQ(p->program().image().rules[0].policy, "helper");
  EXPECT_EQ(p->program().image().rules[0].file, (dir / "lib_globals.gpol").string());
  EXPECT_EQ(Global(false).Run(p->program()).decision, Decision::kKeep);
}

// Every command that checks a file took the same path: each crashed on main.
TEST(UseOrder, EveryCommandAcceptsAForwardUse) {
  const std::string path = ::testing::TempDir() + "use_order_fwd.gpol";
  std::ofstream(path) << kForward << "test p0 {\n  expect keep { is_global: true }\n  expect keep { is_global: false }\n}\n";
  const std::string artifact = ::testing::TempDir() + "use_order_fwd.gpolc";
  const std::vector<std::vector<std::string>> commands = {
      {"lint", path}, {"test", path}, {"compile", path, "--policy", "p1", "-o", artifact},
      {"disasm", path, "--policy", "p0"}};
  for (const auto& args : commands) {
    std::ostringstream out, err;
    EXPECT_EQ(cli::Run(args, out, err, testing::kDataDir), cli::kExitClean) << args[0] << ": " << err.str();
    if (args[0] == "disasm") {
      EXPECT_NE(out.str().find("keep rule 0 (p1 at " + path + ":3)"), std::string::npos) << out.str();
    }
  }
  EXPECT_TRUE(fs::is_regular_file(artifact));
}

}  // namespace
}  // namespace guardpolicy
