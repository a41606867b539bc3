// watch_test.cpp: the third decision, `watch`, through every stage: parse, check (no
// `unsafe` needed; GP3012 where torch can only keep), code, VM, verifier, `.gpolc`, fmt and
// the command line. Under a plain guard_filter_fn a watch is a keep (the bindings' tests).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_runner.h"
#include "guardpolicy/artifact.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/fnv1a.h"
#include "guardpolicy/formatter.h"
#include "guardpolicy/parser.h"
#include "guardpolicy/test_runner.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Entry;
using testing::Src;

constexpr char kWatchModules[] =
    "guardpolicy 1\n"
    "\n"
    "policy p {\n"
    "  keep when guard_source == LOCAL\n"
    "  watch when guard_source.is_unspecialized_nn_module\n"
    "  default watch\n"
    "}\n"
    "\n"
    "test p {\n"
    "  expect watch { guard_type: \"ID_MATCH\", guard_source: \"LOCAL_UNSPECIALIZED_NN_MODULE\" }\n"
    "  expect keep { guard_type: \"TENSOR_MATCH\", guard_source: \"LOCAL\" }\n"
    "}\n";

Entry Guard(std::string_view type, std::string_view source) {
  Entry e;
  e.Enum("guard_type", "GuardType", type).Enum("guard_source", "GuardSource", source);
  return e;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = testing::TestTempPath(name);
  std::ofstream(path) << text;
  return path;
}

TEST(Watch, ParsesAsARuleADefaultAndAnExpectation) {
  auto r = Parse(Src(kWatchModules));
  ASSERT_TRUE(r.diagnostics.empty()) << RenderText(r.diagnostics);
  const PolicyDecl& p = r.module->policies.at(0);
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].rule.decision, Decision::kKeep);
  EXPECT_EQ(p.items[1].rule.decision, Decision::kWatch);
  EXPECT_EQ(p.default_decision, Decision::kWatch);
  EXPECT_EQ(r.module->tests.at(0).expectations.at(0).decision, Decision::kWatch);
  EXPECT_STREQ(DecisionName(Decision::kWatch), "watch");
  EXPECT_TRUE(KeptByTorch(Decision::kWatch));
  EXPECT_FALSE(KeptByTorch(Decision::kDrop));
}

TEST(Watch, IsNoIdentifierAndNoOnErrorAction) {
  auto named = Parse(Src("guardpolicy 1\npolicy watch { default keep }\n"));
  EXPECT_EQ(testing::Codes(named.diagnostics).at(0), codes::kSyntax);
  Loader loader = testing::MakeLoader();
  auto on_error =
      loader.Lint(Src("guardpolicy 1\npolicy p {\n  keep when is_global\n  on_error watch\n}\n"));
  ASSERT_EQ(testing::ErrorCodes(on_error.diagnostics),
            std::vector<std::string>{codes::kUnknownOnError});
  EXPECT_EQ(on_error.diagnostics.items()[0].message, "unknown on_error action `watch`");
}

// A watch never stops torch from catching a change: no `unsafe`, and `unsafe` alone is GP3002.
TEST(Watch, NeedsNoUnsafeAndCountsAsAKeep) {
  Loader loader = testing::MakeLoader();
  auto safe = loader.Lint(Src(kWatchModules));
  EXPECT_FALSE(safe.diagnostics.HasErrors()) << RenderText(safe.diagnostics);
  EXPECT_FALSE(testing::HasCode(safe.diagnostics, codes::kDropsWithoutUnsafe));
  auto marked = loader.Lint(
      Src("guardpolicy 1\nunsafe policy p {\n  watch when is_global\n  default watch\n}\n"));
  EXPECT_TRUE(testing::HasCode(marked.diagnostics, codes::kUnsafeNeverDrops))
      << RenderText(marked.diagnostics);
  // What is watched is kept: dropping the globals does not drop every guard (no GP3009).
  auto most = loader.Lint(
      Src("guardpolicy 1\nunsafe policy p {\n  drop when is_global\n  default watch\n}\n"));
  EXPECT_FALSE(testing::HasCode(most.diagnostics, codes::kDropsEverything))
      << RenderText(most.diagnostics);
  EXPECT_FALSE(most.diagnostics.HasErrors());
}

std::vector<std::string> WatchFindings(const std::string& policy) {
  Loader loader = testing::MakeLoader();
  auto lint = loader.Lint(Src("guardpolicy 1\n" + policy));
  std::vector<std::string> out;
  for (const Diagnostic& d : lint.diagnostics.items()) {
    if (d.code == codes::kUnwatchableWatch) out.push_back(d.message);
  }
  return out;
}

TEST(Watch, Gp3012NamesWhatOnlyAKeepCanHonour) {
  EXPECT_EQ(WatchFindings("policy p {\n  watch when guard_type in {GRAD_MODE, ID_MATCH}\n}\n"),
            std::vector<std::string>{
                "`watch` on `GRAD_MODE` guards is honoured as `keep`: their state is not held "
                "in a dict a watcher can see"});
  EXPECT_EQ(
      WatchFindings(
          "policy p {\n  keep when source.kind in {\"GlobalStateSource\", \"ShapeEnvSource\"}\n"
          "  watch when guard_type == TENSOR_MATCH\n}\n"),
      std::vector<std::string>{
          "`watch` on `TENSOR_MATCH` guards on inputs is honoured as `keep`: an input tensor "
          "is passed anew on every call, and its metadata is held in no dict a watcher can see"});
  // An input object's attributes (a KV cache passed on every call) are watched by the runtime,
  // through the object's identity: no finding for CONSTANT_MATCH or TYPE_MATCH on inputs.
  EXPECT_TRUE(WatchFindings("policy p {\n  keep when guard_type == TENSOR_MATCH\n"
                            "  keep when source.kind in {\"GlobalStateSource\", \"ShapeEnvSource\"}\n"
                            "  watch when guard_source == LOCAL\n}\n")
                  .empty());
  // Module state, parameters, globals: what a dict watcher sees. No finding.
  EXPECT_TRUE(WatchFindings("policy p {\n  watch when guard_source.is_unspecialized_nn_module\n"
                            "  watch when is_global\n  watch when value.is_parameter\n}\n")
                  .empty());
  // The inputs and the ambient guards kept first: `default watch` is fine.
  EXPECT_TRUE(
      WatchFindings("policy p {\n  keep when guard_source == LOCAL\n"
                    "  keep when source.kind in {\"GlobalStateSource\", \"ShapeEnvSource\"}\n"
                    "  default watch\n}\n")
          .empty());
}

TEST(Watch, CompilesToADecideTheVmReturnsAtEveryLevel) {
  for (const int level : {0, 1}) {
    CompileOptions options;
    options.opt_level = level;
    Loader loader(testing::TestSchema(), testing::kDataDir + "/std", options);
    const auto policy = loader.Load(Src(kWatchModules), "p", {});
    const Program& prog = policy->program();
    ASSERT_EQ(prog.image().rules.size(), 2u);
    EXPECT_EQ(prog.image().rules[1].decision, Decision::kWatch);
    EXPECT_EQ(prog.image().default_decision, Decision::kWatch);
    const Outcome module = Guard("ID_MATCH", "LOCAL_UNSPECIALIZED_NN_MODULE")
                               .Bool("guard_source.is_unspecialized_nn_module", true)
                               .Run(prog);
    EXPECT_EQ(module.decision, Decision::kWatch);
    EXPECT_EQ(module.rule, 1);
    const Outcome input = Guard("TENSOR_MATCH", "LOCAL").Run(prog);
    EXPECT_EQ(input.decision, Decision::kKeep);
    EXPECT_EQ(input.rule, 0);
    const Outcome other = Guard("ID_MATCH", "GLOBAL").Run(prog);
    EXPECT_EQ(other.decision, Decision::kWatch);
    EXPECT_EQ(other.rule, -1);
    const std::string listing = Disassemble(prog.image(), loader.schema());
    EXPECT_NE(listing.find("default watch\n"), std::string::npos) << listing;
    EXPECT_NE(listing.find("DECIDE          watch rule 1 (p at test.gpol:5)"), std::string::npos)
        << listing;
    EXPECT_NE(listing.find("DECIDE          watch (default)"), std::string::npos) << listing;
  }
}

// The optimizer keeps a watch and a keep of the same test apart: each DECIDE keeps its rule
// (and the verifier, run after every pass, refuses a DECIDE its rule does not make).
TEST(Watch, OptimizerNeverMergesAWatchWithAKeep) {
  Loader loader = testing::MakeLoader();
  const auto policy = loader.Load(Src("guardpolicy 1\npolicy p {\n"
                                      "  watch when guard_type == ID_MATCH and is_global\n"
                                      "  keep when guard_type == ID_MATCH and not is_global\n"
                                      "  watch when guard_type == TYPE_MATCH\n"
                                      "  default keep\n}\n"),
                                  "p", {});
  const Program& prog = policy->program();
  EXPECT_EQ(Guard("ID_MATCH", "GLOBAL").Bool("is_global", true).Run(prog).decision,
            Decision::kWatch);
  EXPECT_EQ(Guard("ID_MATCH", "LOCAL").Run(prog).decision, Decision::kKeep);
  EXPECT_EQ(Guard("TYPE_MATCH", "LOCAL").Run(prog).decision, Decision::kWatch);
  EXPECT_EQ(Guard("EQUALS_MATCH", "LOCAL").Run(prog).decision, Decision::kKeep);
  for (const Instruction& ins : prog.image().code) {
    if (ins.op != Opcode::kDecide) continue;
    const Decision rule =
        ins.b < 0 ? prog.image().default_decision : prog.image().rules[ins.b].decision;
    EXPECT_EQ(static_cast<Decision>(ins.a), rule) << "DECIDE of rule " << ins.b;
  }
}

std::string Serialized(const std::string& decision) {
  Loader loader = testing::MakeLoader();
  auto p = loader.Load(Src("guardpolicy 1\nunsafe policy p {\n  " + decision +
                           " when is_global\n  drop when has_value\n}\n"),
                       "p", {});
  return SerializePolicy(*p, *testing::TestSchema());
}

TEST(Watch, RoundTripsThroughAGpolcOfTheSameFormatVersion) {
  const std::string bytes = Serialized("watch");
  auto loaded = DeserializePolicy(bytes, *testing::TestSchema(), "w.gpolc");
  const Program& prog = loaded->program();
  EXPECT_EQ(prog.image().rules.at(0).decision, Decision::kWatch);
  EXPECT_EQ(Entry().Bool("is_global", true).Run(prog).decision, Decision::kWatch);
  EXPECT_EQ(Entry().Bool("has_value", true).Run(prog).decision, Decision::kDrop);
  EXPECT_EQ(kArtifactFormatVersion, 5u);  // the layout is unchanged: 5 files load as before
}

// The bytes where a watch policy's artifact differs from the same policy's with keep hold
// the decision (the rule's, and its DECIDE's operand); 3 there is refused, never run.
TEST(Watch, AnArtifactWithAnUnknownDecisionIsRefused) {
  const std::string watch = Serialized("watch"), keep = Serialized("keep");
  ASSERT_EQ(watch.size(), keep.size());
  constexpr size_t kHeader = 36;
  std::vector<std::string> reasons;
  for (size_t i = kHeader; i < watch.size(); ++i) {
    if (watch[i] == keep[i]) continue;
    std::string bad = watch;
    bad[i] = 3;
    const uint64_t h = Fnv1a64(std::string_view(bad).substr(kHeader));
    for (int k = 0; k < 8; ++k) bad[28 + k] = static_cast<char>((h >> (8 * k)) & 0xff);
    try {
      DeserializePolicy(bad, *testing::TestSchema(), "bad.gpolc");
      ADD_FAILURE() << "byte " << i << " = 3 was accepted";
    } catch (const PolicyError& e) {
      reasons.push_back(e.diagnostics().items().at(0).message);
    }
  }
  ASSERT_EQ(reasons.size(), 2u);
  EXPECT_NE(reasons[0].find("rule decision is not keep, drop or watch"), std::string::npos)
      << reasons[0];
  EXPECT_NE(reasons[1].find("decision is not keep, drop or watch"), std::string::npos)
      << reasons[1];
}

TEST(Watch, FmtKeepsItAsWritten) {
  FormatResult r = Format(Src(kWatchModules));
  ASSERT_TRUE(r.text);
  EXPECT_EQ(*r.text, kWatchModules);
}

TEST(Watch, TestBlocksExpectIt) {
  Loader loader = testing::MakeLoader();
  for (const ExpectationResult& r : RunTests(loader, Src(kWatchModules))) {
    EXPECT_TRUE(r.passed()) << r.range.ToString();
  }
  const std::string path = WriteTemp(
      "expect_watch.gpol",
      std::string(kWatchModules) + "\ntest p {\n  expect watch { guard_source: \"LOCAL\" }\n}\n");
  auto cli = testing::RunCli({"test", path});
  EXPECT_EQ(cli.rc, cli::kExitFindings) << cli.err;
  EXPECT_NE(cli.out.find(": PASS: policy `p` watch\n"), std::string::npos) << cli.out;
  EXPECT_NE(
      cli.out.find(": FAIL: policy `p` decided keep by rule 0 at " + path + ":4, expected watch\n"),
      std::string::npos)
      << cli.out;
  EXPECT_NE(cli.out.find("2 passed, 1 failed"), std::string::npos) << cli.out;
}

TEST(Watch, CheckExplainSaysWatchAndCountsItApart) {
  const std::string policy = WriteTemp("watch.gpol", kWatchModules);
  const std::string guards =
      WriteTemp("watch.json", R"({"torch": "2.13.0", "schema_version": 1, "frames": [
    {"frame": 0, "code": "forward", "compile_id": "0/0", "entries": [
      {"guard_type": "TENSOR_MATCH", "guard_source": "LOCAL", "name": "x"},
      {"guard_type": "ID_MATCH", "guard_source": "LOCAL_UNSPECIALIZED_NN_MODULE", "name": "self"},
      {"guard_type": "GRAD_MODE", "guard_source": "GLOBAL", "name": ""}]}]})");
  auto r = testing::RunCli({"check", policy, "--guards", guards, "--explain"});
  ASSERT_EQ(r.rc, cli::kExitClean) << r.err;
  EXPECT_NE(r.out.find("  keep  TENSOR_MATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  watch ID_MATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  watch GRAD_MODE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("policy `p`: 3 guards in 1 frames: 1 kept, 2 watched, 0 dropped\n"),
            std::string::npos)
      << r.out;
}

TEST(Watch, LintAndDisasmOnTheCommandLine) {
  const std::string policy = WriteTemp("lint_watch.gpol", kWatchModules);
  auto lint = testing::RunCli({"lint", policy});
  EXPECT_EQ(lint.rc, cli::kExitClean) << lint.err;
  EXPECT_NE(lint.err.find("warning[GP3012]"), std::string::npos)
      << lint.err;  // `default watch` reaches GRAD_MODE
  auto disasm = testing::RunCli({"disasm", policy});
  EXPECT_EQ(disasm.rc, cli::kExitClean) << disasm.err;
  EXPECT_NE(disasm.out.find("watch (default)"), std::string::npos) << disasm.out;
}

}  // namespace
}  // namespace guardpolicy
