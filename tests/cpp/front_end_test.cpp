// front_end_test.cpp: the stages hand values on: the linker's open link and WithParams, and
// the analysis evaluating only through the RuleEvaluator it is given.
#include <gtest/gtest.h>

#include "guardpolicy/analysis.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/evaluator.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/snapshot.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Src;

// Answers with a fixed decision and keeps what it was asked.
class FakeEvaluator final : public RuleEvaluator {
 public:
  explicit FakeEvaluator(std::vector<std::optional<Decided>> answer) : answer_(std::move(answer)) {}

  std::vector<std::optional<Decided>> Decide(const LinkedPolicy& linked,
                                             const std::vector<EntryLiterals>& entries) override {
    asked_rules.push_back(linked.rules.size());
    asked.insert(asked.end(), entries.begin(), entries.end());
    return answer_;
  }

  std::vector<size_t> asked_rules;
  std::vector<EntryLiterals> asked;

 private:
  std::vector<std::optional<Decided>> answer_;
};

constexpr char kPolicy[] =
    "guardpolicy 1\n"
    "unsafe policy p(depth: int = 2) {\n"
    "  keep when guard_type == TENSOR_MATCH\n"
    "  use skip_guard_on_globals\n"
    "  drop when source.depth > depth\n"
    "}\n";

// The analysis' ambient-guard question goes to the evaluator, over the linked rules; its
// answer, not a program of the analysis' own, decides the GP3008 warning.
TEST(FrontEnd, TheAnalysisAsksTheEvaluatorAboutTheAmbientGuards) {
  Loader loader = testing::MakeLoader();
  LintResult lint = loader.Lint(Src(kPolicy));
  ASSERT_FALSE(lint.diagnostics.HasErrors()) << RenderText(lint.diagnostics);
  const PolicyDecl& p = lint.module->policies[0];
  const LinkedPolicy linked = LinkOpen(p, loader, {});
  ASSERT_EQ(linked.rules.size(), 3u);  // keep, the one rule of skip_guard_on_globals, drop

  // SHAPE_ENV dropped by the last rule, GLOBAL_STATE left open (a plugin failed), GRAD_MODE
  // and DEFAULT_DEVICE watched by the last rule (GP3012), two kept, the rest unanswered.
  FakeEvaluator evaluator({Decided{Decision::kDrop, 2}, std::nullopt, Decided{Decision::kWatch, 2},
                           Decided{Decision::kKeep, -1}, Decided{Decision::kKeep, -1},
                           Decided{Decision::kWatch, 2}});
  Diagnostics diags;
  (void)AnalyzePolicy(linked, loader.schema(), evaluator, {}, diags);
  ASSERT_EQ(evaluator.asked_rules, std::vector<size_t>{3});
  const std::vector<std::pair<std::string, std::string>> asked_types = {
      {"SHAPE_ENV", "SHAPE_ENV"},
      {"GLOBAL_STATE", "GLOBAL"},
      {"GRAD_MODE", "GLOBAL"},
      {"DETERMINISTIC_ALGORITHMS", "GLOBAL"},
      {"TORCH_FUNCTION_STATE", "GLOBAL"},
      {"DEFAULT_DEVICE", "GLOBAL"},
      {"AUTOGRAD_SAVED_TENSORS_HOOKS", "GLOBAL"},
      {"FSDP_TRAINING_STATE", "GLOBAL"},
      {"FUNCTORCH_STACK_MATCH", "GLOBAL"},
      {"DUAL_LEVEL", "GLOBAL"}};
  ASSERT_EQ(evaluator.asked.size(), asked_types.size());
  for (size_t i = 0; i < asked_types.size(); ++i) {
    EXPECT_EQ(evaluator.asked[i].at("guard_type").str, asked_types[i].first);
    EXPECT_EQ(evaluator.asked[i].at("guard_source").str, asked_types[i].second);
  }
  std::vector<std::string> ambient;
  for (const Diagnostic& d : diags.items()) {
    if ((d.code == codes::kRiskyDrop && d.message.starts_with("drops the")) ||
        d.code == codes::kUnwatchableWatch) {
      ambient.push_back(d.message + " at " + std::to_string(d.range.start().line));
    }
  }
  EXPECT_EQ(
      ambient,
      (std::vector<std::string>{
          "drops the `SHAPE_ENV` guard at 5",
          "`watch` on `GRAD_MODE` and `DEFAULT_DEVICE` guards is honoured as `keep`: their state "
          "is not held in a dict a watcher can see at 5"}));

  // The real evaluator (through Lint): the policy keeps both ambient guards (source.depth
  // is 0 on them, not > 2), so Lint says nothing about them.
  for (const Diagnostic& d : lint.diagnostics.items()) {
    EXPECT_FALSE(d.message.starts_with("drops the")) << d.message;
    EXPECT_NE(d.code, codes::kUnwatchableWatch) << d.message;
  }
}

// The open link leaves the policy's own parameters unbound; WithParams binds those and
// nothing else.
TEST(FrontEnd, WithParamsBindsOnlyThePolicysOwnRules) {
  Loader loader = testing::MakeLoader();
  LintResult lint = loader.Lint(Src("guardpolicy 1\n"
                                    "unsafe policy inner(prefix: string = \"self.\") {\n"
                                    "  drop when name startswith prefix\n"
                                    "}\n"
                                    "unsafe policy outer(depth: int = 2) {\n"
                                    "  use inner(prefix = \"L['x']\")\n"
                                    "  drop when source.depth > depth\n"
                                    "}\n"));
  ASSERT_FALSE(lint.diagnostics.HasErrors()) << RenderText(lint.diagnostics);
  const LinkedPolicy open = LinkOpen(lint.module->policies[1], loader, {});
  ASSERT_EQ(open.rules.size(), 2u);
  EXPECT_EQ(open.rules[0].bound.at("prefix").str, "L['x']");
  EXPECT_TRUE(open.rules[1].bound.empty());
  Literal five;
  five.kind = Literal::Kind::kInt;
  five.i = 5;
  const LinkedPolicy bound = WithParams(open, {{"depth", five}});
  EXPECT_EQ(bound.rules[0].bound.size(), 1u);
  EXPECT_EQ(bound.rules[0].bound.at("prefix").str, "L['x']");
  EXPECT_EQ(bound.rules[1].bound.at("depth").i, 5);
}

// Loading compiles from the linked rules with the parameters bound: the value decides.
TEST(FrontEnd, LoadCompilesTheLinkedRulesWithTheGivenParameters) {
  Loader loader = testing::MakeLoader();
  Literal five;
  five.kind = Literal::Kind::kInt;
  five.i = 5;
  auto p2 = loader.Load(Src(kPolicy), "p", {});
  auto p5 = loader.Load(Src(kPolicy), "p", {{"depth", five}});
  FieldValues entry;
  entry["source.depth"] = Value{3, 0, {}};
  const auto decide = [](const CompiledPolicy& p, const FieldValues& e) {
    return Evaluate(p.program(), Snapshot::View(p.program(), e).data()).decision;
  };
  EXPECT_EQ(decide(*p2, entry), Decision::kDrop);  // 3 > 2
  EXPECT_EQ(decide(*p5, entry), Decision::kKeep);  // 3 > 5 is false
}

}  // namespace
}  // namespace guardpolicy
