// checker_test.cpp: name resolution, types and safety checks, each with its code and position.
#include <gtest/gtest.h>

#include <map>

#include "guardpolicy/diag_codes.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Codes;
using testing::Src;

Diagnostics LintText(const std::string& body) {
  Loader loader = testing::MakeLoader();
  return loader.Lint(Src("guardpolicy 1\n" + body)).diagnostics;
}

TEST(Checker, StdPoliciesHaveNoErrorsAndOnlyTheirTrueRisks) {
  Loader loader = testing::MakeLoader();
  const std::map<std::string, std::vector<std::string>> expected = {
      {"skip_guard_on_inbuilt_nn_modules", {}},
      {"skip_guard_on_all_nn_modules", {}},
      // SHAPE_ENV, GLOBAL_STATE, the value guards of non-tensor inputs (only TENSOR_MATCH is kept)
      {"keep_tensor_guards", {codes::kRiskyDrop, codes::kRiskyDrop, codes::kRiskyDrop}},
      {"skip_guard_on_globals", {}},
      {"keep_portable_guards", {codes::kRiskyDrop}},  // the value guards of non-tensor inputs
      // Every guard, and by name the ones that matter most: SHAPE_ENV, GLOBAL_STATE, input
      // tensors, non-tensor inputs.
      {"skip_all_guards",
       {codes::kDropsEverything, codes::kRiskyDrop, codes::kRiskyDrop, codes::kRiskyDrop, codes::kRiskyDrop}},
  };
  for (const auto& [name, want] : expected) {
    auto r = loader.Lint(SourceFileFromPath(testing::kDataDir + "/std/" + name + ".gpol"));
    EXPECT_EQ(Codes(r.diagnostics), want) << name << "\n" << RenderText(r.diagnostics);
  }
}

TEST(Checker, UnknownFieldWithDidYouMean) {
  auto d = LintText("unsafe policy p {\n  drop when nmae == \"x\"\n}\n");
  ASSERT_EQ(Codes(d), std::vector<std::string>{codes::kUnknownField});
  EXPECT_EQ(d.items()[0].range.ToString(), "test.gpol:3:13");
  EXPECT_EQ(d.items()[0].message, "unknown field `nmae`");
  EXPECT_EQ(d.items()[0].help, "did you mean `name`?");
}

// One error per mistake: an enum member beside a misspelt field is not reported as an
// unknown field too (the field's error type poisons it), on either side of the comparison.
TEST(Checker, MisspeltFieldBesideAnEnumMemberIsOneError) {
  for (const std::string cond :
       {"gaurd_type == TENSOR_MATCH", "TENSOR_MATCH == gaurd_type", "gaurd_type != TENSR_MATCH"}) {
    SCOPED_TRACE(cond);
    auto d = LintText("unsafe policy p {\n  drop when " + cond + "\n}\n");
    ASSERT_EQ(Codes(d), std::vector<std::string>{codes::kUnknownField}) << RenderText(d);
    EXPECT_EQ(d.items()[0].message, "unknown field `gaurd_type`");
    EXPECT_EQ(d.items()[0].help, "did you mean `guard_type`?");
    EXPECT_EQ(d.items()[0].range.ToString(), cond[0] == 'g' ? "test.gpol:3:13" : "test.gpol:3:29");
  }
}

// A misspelt field beside an operand with its own error is still reported, and the errors
// of one condition come in source order whichever operand is resolved first.
TEST(Checker, ErrorsOfOneConditionComeInSourceOrder) {
  auto d = LintText("unsafe policy p {\n  drop when nmae == no_such_fn(gaurd)\n}\n");
  ASSERT_EQ(Codes(d), (std::vector<std::string>{codes::kUnknownField, codes::kUnknownFunction,
                                                codes::kUnknownField}))
      << RenderText(d);
  EXPECT_EQ(d.items()[0].range.ToString(), "test.gpol:3:13");
  EXPECT_EQ(d.items()[0].help, "did you mean `name`?");
  EXPECT_EQ(d.items()[1].range.ToString(), "test.gpol:3:21");
  EXPECT_EQ(d.items()[2].range.ToString(), "test.gpol:3:32");
}

TEST(Checker, UnknownClosedEnumLiteralIsAnError) {
  auto d = LintText("unsafe policy p {\n  drop when guard_source == LOCALL\n}\n");
  ASSERT_EQ(Codes(d), std::vector<std::string>{codes::kUnknownEnumLiteral});
  EXPECT_EQ(d.items()[0].help, "did you mean `LOCAL`?");
  EXPECT_EQ(d.items()[0].range.ToString(), "test.gpol:3:29");
}

TEST(Checker, UnknownGuardTypeIsAWarningBecauseTheEnumIsOpen) {
  auto d = LintText("unsafe policy p {\n  drop when guard_type == _spyre_TENSOR_MATCH\n}\n");
  // No risk warnings either: an unknown guard type is none of SHAPE_ENV, GLOBAL_STATE, TENSOR_MATCH.
  ASSERT_EQ(Codes(d), std::vector<std::string>{codes::kUnknownGuardType});
  EXPECT_EQ(d.items()[0].severity, Severity::kWarning);
  EXPECT_FALSE(d.HasErrors());
  // A new name is no misspelling of a torch name (it once suggested `COW_TENSOR_MATCH`).
  EXPECT_EQ(d.items()[0].help, "third-party guard types are allowed; check the spelling");
}

TEST(Checker, MisspeltGuardTypeIsAnErrorWhereverItIsWritten) {
  // Edit distance <= 2 from a GuardType torch 2.13 knows: the rule would never fire.
  auto d = LintText("unsafe policy p(t: GuardType = \"ID_MACTH\") {\n"
                    "  drop when guard_type == TENSOR_MACH or guard_type == t\n"
                    "  use keep_tensor_guards\n}\n"
                    "test p { expect drop { guard_type: \"SHAPE_EVN\" } }\n");
  ASSERT_EQ(Codes(d), (std::vector<std::string>{codes::kUnknownEnumLiteral, codes::kUnknownEnumLiteral,
                                                codes::kUnknownEnumLiteral}))
      << RenderText(d);
  EXPECT_EQ(d.items()[0].message, "unknown GuardType `ID_MACTH`");
  EXPECT_EQ(d.items()[0].help, "did you mean `ID_MATCH`?");
  EXPECT_EQ(d.items()[1].message, "unknown GuardType `TENSOR_MACH`");
  EXPECT_EQ(d.items()[1].help, "did you mean `TENSOR_MATCH`?");
  EXPECT_EQ(d.items()[1].range.ToString(), "test.gpol:3:27");
  EXPECT_EQ(d.items()[2].help, "did you mean `SHAPE_ENV`?");
  // Distance 3 is a new name: a warning.
  auto far = LintText("unsafe policy p {\n  drop when guard_type == TENSOR_MA\n}\n");
  ASSERT_EQ(Codes(far), std::vector<std::string>{codes::kUnknownGuardType});
  // At load time too.
  Loader loader = testing::MakeLoader();
  Literal value;
  value.kind = Literal::Kind::kString;
  value.str = "GLOBAL_STATES";
  try {
    loader.Load(Src("guardpolicy 1\nunsafe policy p(t: GuardType = \"ID_MATCH\") { drop when guard_type == t }\n"),
                "p", {{"t", value}});
    FAIL() << "a misspelt GuardType parameter value loaded";
  } catch (const PolicyError& e) {
    ASSERT_EQ(testing::ErrorCodes(e.diagnostics()), std::vector<std::string>{codes::kParamValue});
    EXPECT_EQ(e.diagnostics().items()[0].help, "did you mean `GLOBAL_STATE`?");
  }
}

TEST(Checker, TypeMismatches) {
  auto d = LintText(
      "unsafe policy p {\n"
      "  drop when source.depth == \"3\"\n"
      "  drop when name > \"a\"\n"
      "  drop when guard_type == guard_source\n"
      "  drop when name contains 3\n"
      "  drop when derived_guard_types contains LOCAL\n"
      "}\n");
  EXPECT_EQ(Codes(d), (std::vector<std::string>{codes::kTypeMismatch, codes::kTypeMismatch,
                                                codes::kTypeMismatch, codes::kTypeMismatch,
                                                codes::kUnknownGuardType, }));
}

TEST(Checker, ConditionsMustBeBool) {
  auto d = LintText("unsafe policy p {\n  drop when name\n  drop when not source.depth\n}\n");
  EXPECT_EQ(Codes(d), (std::vector<std::string>{codes::kConditionNotBool, codes::kConditionNotBool}));
}

TEST(Checker, BadRegexCarriesRe2Message) {
  auto d = LintText("unsafe policy p {\n  drop when name matches \"([a-\"\n}\n");
  ASSERT_EQ(Codes(d), std::vector<std::string>{codes::kBadRegex});
  EXPECT_NE(d.items()[0].message.find("missing ]"), std::string::npos) << d.items()[0].message;
}

TEST(Checker, UseResolvesStdAndReportsUnknownPolicies) {
  EXPECT_TRUE(LintText("unsafe policy p {\n  use skip_guard_on_globals\n}\n").empty());
  auto d = LintText("unsafe policy p {\n  use skip_guard_on_globls\n}\n");
  ASSERT_EQ(Codes(d), std::vector<std::string>{codes::kUnknownPolicy});
  EXPECT_EQ(d.items()[0].help, "did you mean `skip_guard_on_globals`?");
}

TEST(Checker, UseArgumentsAreChecked) {
  auto d = LintText("unsafe policy p {\n  use keep_tensor_guards(keep_paramters = true)\n"
                    "  use keep_tensor_guards(keep_parameters = 3)\n}\n");
  EXPECT_EQ(Codes(d), (std::vector<std::string>{codes::kBadParameter, codes::kBadParameter}));
  EXPECT_EQ(d.items()[0].help, "did you mean `keep_parameters`?");
}

TEST(Checker, UseCyclesAndDuplicatePolicies) {
  auto d = LintText("unsafe policy a { use b\n drop when is_global }\n"
                    "unsafe policy b { use a }\nunsafe policy a { default drop }\n");
  EXPECT_EQ(testing::ErrorCodes(d), (std::vector<std::string>{codes::kDuplicatePolicy, codes::kUseCycle}));
}

TEST(Checker, DroppingRequiresUnsafe) {
  auto d = LintText("policy p {\n  drop when is_global\n}\n");
  ASSERT_EQ(testing::ErrorCodes(d), std::vector<std::string>{codes::kDropsWithoutUnsafe});
  EXPECT_EQ(d.items()[0].range.ToString(), "test.gpol:2:8");
  // Dropping through `use` counts too; a default drop counts.
  EXPECT_EQ(testing::ErrorCodes(LintText("policy p { use skip_guard_on_globals }\n")),
            std::vector<std::string>{codes::kDropsWithoutUnsafe});
  EXPECT_EQ(testing::ErrorCodes(LintText("policy p { default drop }\n")),
            std::vector<std::string>{codes::kDropsWithoutUnsafe});
  auto w = LintText("unsafe policy p { keep when is_global }\n");
  ASSERT_EQ(Codes(w), std::vector<std::string>{codes::kUnsafeNeverDrops});
  EXPECT_EQ(w.items()[0].severity, Severity::kWarning);
}

TEST(Checker, ConfigStanceAndParams) {
  auto d = LintText(
      "unsafe policy p(x: float, y: bool = 3) {\n"
      "  default drop\n"
      "  config install_free_tensor = true\n"
      "  config use_recursive_dict_tags_for_guards = 1\n"
      "  stance skip_guard_eval_safe after 8 calls\n"
      "}\n");
  EXPECT_EQ(Codes(d), (std::vector<std::string>{codes::kBadParameter, codes::kBadParameter,
                                                codes::kUnknownConfig, codes::kBadParameter,
                                                codes::kUnknownStance}));
  EXPECT_EQ(d.items()[2].help, "did you mean `install_free_tensors`?");
}

TEST(Checker, EveryProblemIsReportedNotJustTheFirst) {
  auto d = LintText("unsafe policy p {\n  drop when a == 1\n  drop when b == 2\n  drop when c == 3\n}\n");
  EXPECT_EQ(d.size(), 3u);
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

TEST(Checker, RuleCountLimit) {
  std::string body = "unsafe policy p {\n";
  for (int i = 0; i < 4097; ++i) body += "  drop when source.depth == " + std::to_string(i) + "\n";
  body += "}\n";
  Loader loader = testing::MakeLoader();
  auto d = loader.Lint(testing::Src("guardpolicy 1\n" + body)).diagnostics;
  EXPECT_TRUE(testing::HasCode(d, codes::kTooManyRules)) << RenderText(d).substr(0, 500);
}

}  // namespace
}  // namespace guardpolicy
