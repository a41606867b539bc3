// risk_analysis_test.cpp: GP3008/GP3009, what a policy's drops can make stale.
#include <gtest/gtest.h>

#include "guardpolicy/diag_codes.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Src;

std::vector<std::string> Messages(const std::string& body) {
  Loader loader = testing::MakeLoader();
  const Diagnostics d = loader.Lint(Src("guardpolicy 1\n" + body)).diagnostics;
  std::vector<std::string> out;
  for (const Diagnostic& x : d.items()) out.push_back(x.code + " " + x.range.ToString() + " " + x.message);
  return out;
}

TEST(RiskAnalysis, DroppingEveryGuardStillNamesTheGlobalStateGuard) {
  // Issue 17 item 16: GP3009 used to stand alone, so nothing said that grad mode or
  // torch.set_num_threads (the GLOBAL_STATE guard) went unchecked.
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when true or is_global\n}\n"),
            (std::vector<std::string>{
                "GP3004 test.gpol:3:13 condition is always true",
                "GP3009 test.gpol:2:15 policy `p` drops every guard",
                "GP3008 test.gpol:3:3 drops the `SHAPE_ENV` guard",
                "GP3008 test.gpol:3:3 drops the `GLOBAL_STATE` guard",
                "GP3008 test.gpol:3:3 can drop `TENSOR_MATCH` guards on input tensors",
            }));
}

TEST(RiskAnalysis, RulesThatDropEverythingBeforeADefaultKeep) {
  // The default keep is never reached: every guard is dropped (GP3009 said nothing here).
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when is_global\n  drop when not is_global\n  default keep\n}\n"),
            (std::vector<std::string>{
                "GP3009 test.gpol:2:15 policy `p` drops every guard",
                "GP3008 test.gpol:4:3 drops the `SHAPE_ENV` guard",
                "GP3008 test.gpol:4:3 drops the `GLOBAL_STATE` guard",
                "GP3008 test.gpol:4:3 can drop `TENSOR_MATCH` guards on input tensors",
            }));
}

TEST(RiskAnalysis, ADropLimitedToABuiltinTypeCannotDropTensorGuards) {
  // A value of a Python built-in class is no tensor, so no TENSOR_MATCH guard matches.
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type == \"builtins.NoneType\"\n}\n"),
            std::vector<std::string>{});
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type in {\"builtins.int\", \"builtins.float\"}\n"
                     "  drop when value.type startswith \"builtins.\" and not is_global\n}\n"),
            std::vector<std::string>{});
  // A parameter bound by `use`; unbound, it could be any type (so the next policy warns).
  EXPECT_EQ(Messages("unsafe policy p {\n  use q(t = \"builtins.bool\")\n}\n"
                     "unsafe policy q(t: string = \"builtins.int\") {\n  drop when value.type == t\n}\n"),
            std::vector<std::string>{"GP3008 test.gpol:6:3 can drop `TENSOR_MATCH` guards on input tensors"});
  // A module is no tensor either.
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.is_module\n}\n"), std::vector<std::string>{});
  // A type that can be a tensor's still warns, as does a negated test.
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type == \"torch.Tensor\"\n}\n"),
            std::vector<std::string>{"GP3008 test.gpol:3:3 can drop `TENSOR_MATCH` guards on input tensors"});
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type != \"builtins.NoneType\"\n}\n"),
            (std::vector<std::string>{"GP3008 test.gpol:3:3 drops the `SHAPE_ENV` guard",
                                      "GP3008 test.gpol:3:3 drops the `GLOBAL_STATE` guard",
                                      "GP3008 test.gpol:3:3 can drop `TENSOR_MATCH` guards on input tensors"}));
  // The fact only silences the warning; the optimizer does not use it: a row no torch entry
  // could be (a NoneType tensor) still decides by the rules as written.
  Loader loader = testing::MakeLoader();
  const std::string never = "guardpolicy 1\nunsafe policy p {\n"
                           "  drop when value.is_tensor and value.type == \"builtins.NoneType\"\n}\n";
  EXPECT_EQ(Messages(never.substr(14)), std::vector<std::string>{"GP3005 test.gpol:3:13 condition is always false"});
  auto p = loader.Load(Src(never), "p", {});
  testing::Entry e;
  e.Str("value.type", "builtins.NoneType").Bool("value.is_tensor", true).Bool("has_value", true);
  const Outcome o = e.Run(p->program());
  EXPECT_EQ(o.decision, Decision::kDrop);
  EXPECT_EQ(o.rule, 0);
}

}  // namespace
}  // namespace guardpolicy
