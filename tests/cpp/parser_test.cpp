// parser_test.cpp: source text -> AST, syntax errors and input limits.
#include <gtest/gtest.h>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/parser.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Codes;
using testing::Src;

TEST(Parser, BuildsPoliciesRulesAndItems) {
  auto r = Parse(Src(R"(guardpolicy 1
# comment
unsafe policy serving(keep_parameters: bool = false, depth: int = 3) {
  doc "serving policy"
  use skip_guard_on_all_nn_modules
  keep when guard_type in {GLOBAL_STATE, SHAPE_ENV}
  drop when is_global and name matches "^G\\['(CONFIG|FLAGS)'\\]"
  default keep
  config install_free_tensors = true
  stance skip_guard_eval_unsafe after 8 calls
  verify every 100 calls
  on_violation warn
  dispatch direct
  on_error raise
}
test serving {
  expect drop { guard_type: "ID_MATCH", name: "self.fc" }
}
)"));
  ASSERT_TRUE(r.diagnostics.empty()) << RenderText(r.diagnostics);
  const Module& m = *r.module;
  EXPECT_EQ(m.version, 1);
  ASSERT_EQ(m.policies.size(), 1u);
  const PolicyDecl& p = m.policies[0];
  EXPECT_EQ(p.name, "serving");
  EXPECT_TRUE(p.is_unsafe);
  ASSERT_EQ(p.params.size(), 2u);
  EXPECT_EQ(p.params[1].name, "depth");
  EXPECT_EQ(p.params[1].default_value->i, 3);
  EXPECT_EQ(p.doc.value(), "serving policy");
  ASSERT_EQ(p.items.size(), 3u);
  EXPECT_EQ(p.items[0].kind, Item::Kind::kUse);
  EXPECT_EQ(p.items[0].use.target, "skip_guard_on_all_nn_modules");
  EXPECT_EQ(p.items[1].rule.condition->kind, ExprKind::kIn);
  EXPECT_EQ(p.items[1].rule.condition->kids.size(), 3u);
  const Expr& drop = *p.items[2].rule.condition;
  EXPECT_EQ(drop.kind, ExprKind::kAnd);
  EXPECT_EQ(drop.kids[1]->kind, ExprKind::kStringOp);
  EXPECT_EQ(drop.kids[1]->op, BinaryOp::kMatches);
  EXPECT_EQ(drop.kids[1]->kids[1]->literal.str, "^G\\['(CONFIG|FLAGS)'\\]");
  EXPECT_EQ(p.default_decision, Decision::kKeep);
  ASSERT_EQ(p.runtime.config.size(), 1u);
  EXPECT_EQ(p.runtime.config[0].knob, "install_free_tensors");
  EXPECT_EQ(p.runtime.stance->after_calls, 8);
  EXPECT_EQ(p.runtime.verify->every_calls, 100);
  EXPECT_EQ(p.runtime.on_violation->action, "warn");
  EXPECT_EQ(p.runtime.dispatch->mode, "direct");
  EXPECT_EQ(p.runtime.EffectiveOnError(), OnError::kRaise);
  ASSERT_EQ(m.tests.size(), 1u);
  EXPECT_EQ(m.tests[0].expectations[0].fields[1].value.str, "self.fc");
}

TEST(Parser, PrecedenceNotBindsLooserThanComparison) {
  auto r = Parse(Src("guardpolicy 1\npolicy p { keep when not source.depth == 3 or is_global }\n"));
  ASSERT_TRUE(r.diagnostics.empty()) << RenderText(r.diagnostics);
  const Expr& e = *r.module->policies[0].items[0].rule.condition;
  ASSERT_EQ(e.kind, ExprKind::kOr);
  ASSERT_EQ(e.kids[0]->kind, ExprKind::kNot);
  EXPECT_EQ(e.kids[0]->kids[0]->kind, ExprKind::kCompare);
}

TEST(Parser, SyntaxErrorsHaveLineAndColumnAndAllAreReported) {
  auto r = Parse(Src("guardpolicy 1\npolicy p {\n  keep when == 3\n  drop wen is_global\n}\n"));
  ASSERT_GE(r.diagnostics.size(), 2u);
  EXPECT_EQ(r.diagnostics.items()[0].code, codes::kSyntax);
  EXPECT_EQ(r.diagnostics.items()[0].range.ToString(), "test.gpol:3:13");
  EXPECT_EQ(r.diagnostics.items().back().range.start().line, 4);
}

TEST(Parser, RejectsUnknownVersion) {
  auto r = Parse(Src("guardpolicy 2\npolicy p { default keep }\n"));
  EXPECT_EQ(Codes(r.diagnostics), std::vector<std::string>{codes::kVersion});
  EXPECT_EQ(r.diagnostics.items()[0].range.ToString(), "test.gpol:1:13");
}

TEST(Parser, BadEscapeAndIntOverflow) {
  auto r = Parse(Src("guardpolicy 1\npolicy p {\n  keep when name == \"a\\qb\"\n  keep when source.depth == 99999999999999999999\n}\n"));
  EXPECT_EQ(Codes(r.diagnostics), (std::vector<std::string>{codes::kBadEscape, codes::kIntRange}));
  EXPECT_EQ(r.diagnostics.items()[0].range.ToString(), "test.gpol:3:23");
}

TEST(Parser, DeepNestingIsADiagnosticNotAStackOverflow) {
  std::string deep = "guardpolicy 1\npolicy p { keep when " + std::string(10000, '(') + "is_global" +
                     std::string(10000, ')') + " }\n";
  auto r = Parse(Src(deep));
  EXPECT_EQ(r.module, nullptr);
  EXPECT_EQ(Codes(r.diagnostics), std::vector<std::string>{codes::kNestingTooDeep});
}

TEST(Parser, RefusesNulInvalidUtf8AndHugeInput) {
  EXPECT_EQ(Codes(Parse(Src(std::string("guardpolicy 1\0", 14))).diagnostics),
            std::vector<std::string>{codes::kBadEncoding});
  EXPECT_EQ(Codes(Parse(Src("guardpolicy 1\n# \xff\xfe\n")).diagnostics),
            std::vector<std::string>{codes::kBadEncoding});
  EXPECT_EQ(Codes(Parse(Src(std::string(2 << 20, ' '))).diagnostics),
            std::vector<std::string>{codes::kSourceTooLarge});
}

TEST(Parser, Utf8InStringsKeepsByteColumns) {
  auto r = Parse(Src("guardpolicy 1\npolicy p { keep when name == \"é\" $ }\n"));
  ASSERT_FALSE(r.diagnostics.empty());
  // `$` follows a two-byte character: its byte column is 35.
  EXPECT_EQ(r.diagnostics.items()[0].range.ToString(), "test.gpol:2:35");
}

}  // namespace
}  // namespace guardpolicy
