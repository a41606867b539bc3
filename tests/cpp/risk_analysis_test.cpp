// risk_analysis_test.cpp: GP3008/GP3009, what a policy's drops can make stale; GP3011, names
// torch never produces.
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
                "GP3008 test.gpol:3:3 can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` guards on non-tensor inputs",
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
                "GP3008 test.gpol:4:3 can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` guards on non-tensor inputs",
            }));
}

TEST(RiskAnalysis, ADropLimitedToABuiltinTypeCannotDropTensorGuards) {
  // A value of a Python built-in class is no tensor, so no TENSOR_MATCH guard matches (off
  // the inputs: on them, it is the value guard of a None or int argument).
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type == \"builtins.NoneType\" and guard_source != LOCAL\n}\n"),
            std::vector<std::string>{});
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type in {\"builtins.int\", \"builtins.float\"} and is_global\n"
                     "  drop when value.type startswith \"builtins.\" and guard_source.is_unspecialized_nn_module\n}\n"),
            std::vector<std::string>{});
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type == \"builtins.NoneType\"\n}\n"),
            std::vector<std::string>{
                "GP3008 test.gpol:3:3 can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` guards on non-tensor inputs"});
  // A parameter bound by `use`; unbound, it could be any type (so the next policy warns of
  // tensors). Both can drop a bool or int argument's value guard.
  EXPECT_EQ(Messages("unsafe policy p {\n  use q(t = \"builtins.bool\")\n}\n"
                     "unsafe policy q(t: string = \"builtins.int\") {\n  drop when value.type == t\n}\n"),
            (std::vector<std::string>{
                "GP3008 test.gpol:3:3 can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` guards on non-tensor inputs",
                "GP3008 test.gpol:6:3 can drop `TENSOR_MATCH` guards on input tensors",
                "GP3008 test.gpol:6:3 can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` guards on non-tensor inputs"}));
  // A module is no tensor either.
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.is_module\n}\n"), std::vector<std::string>{});
  // A type that can be a tensor's still warns, as does a negated test.
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type == \"torch.Tensor\" and guard_type == TENSOR_MATCH\n}\n"),
            std::vector<std::string>{"GP3008 test.gpol:3:3 can drop `TENSOR_MATCH` guards on input tensors"});
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when value.type != \"builtins.NoneType\"\n}\n"),
            (std::vector<std::string>{"GP3008 test.gpol:3:3 drops the `SHAPE_ENV` guard",
                                      "GP3008 test.gpol:3:3 drops the `GLOBAL_STATE` guard",
                                      "GP3008 test.gpol:3:3 can drop `TENSOR_MATCH` guards on input tensors",
                                      "GP3008 test.gpol:3:3 can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` "
                                      "guards on non-tensor inputs"}));
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

TEST(RiskAnalysis, DroppingValueGuardsOnNonTensorInputsIsNamed) {
  // Issue 15: a transformer_options-style dict argument went stale unnoticed. Its items are
  // CONSTANT_MATCH (guard_source LOCAL) like a flag or a number argument.
  const std::string input_values =
      "GP3008 test.gpol:4:3 can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` guards on non-tensor inputs";
  EXPECT_EQ(Messages("unsafe policy p {\n  keep when guard_type in {SHAPE_ENV, GLOBAL_STATE, TENSOR_MATCH}\n"
                     "  drop when guard_type == CONSTANT_MATCH\n  default keep\n}\n"),
            std::vector<std::string>{input_values});
  EXPECT_EQ(Messages("unsafe policy p {\n  keep when guard_type in {SHAPE_ENV, GLOBAL_STATE, TENSOR_MATCH}\n"
                     "  drop when path startswith \"input:transformer_options\"\n  default keep\n}\n"),
            std::vector<std::string>{input_values});
  // Inputs kept first, or a drop limited to module state or globals: nothing to say.
  EXPECT_EQ(Messages("unsafe policy p {\n  keep when guard_source == LOCAL\n"
                     "  drop when guard_type in {CONSTANT_MATCH, EQUALS_MATCH, TYPE_MATCH}\n  default keep\n}\n"),
            (std::vector<std::string>{}));
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when guard_source.is_unspecialized_nn_module\n"
                     "  drop when is_global and guard_type == CONSTANT_MATCH\n  default keep\n}\n"),
            (std::vector<std::string>{}));
  // Other guard types on inputs (DICT_KEYS_MATCH, ID_MATCH) are not this risk.
  EXPECT_EQ(Messages("unsafe policy p {\n  drop when guard_type in {DICT_KEYS_MATCH, ID_MATCH}\n  default keep\n}\n"),
            (std::vector<std::string>{}));
}

TEST(RiskAnalysis, NamesTorchNeverProducesAreWarnedWithThePathSpelling) {
  Loader loader = testing::MakeLoader();
  const Diagnostics d = loader.Lint(Src(
      "guardpolicy 1\nunsafe policy p {\n"
      "  drop when name == \"self.fc.weight\" and guard_source.is_unspecialized_nn_module\n"
      "  drop when name startswith \"self.layers.0.\" and guard_source.is_unspecialized_nn_module\n"
      "  drop when name in {\"x\", \"self.layers[0].attn\"} and guard_source.is_unspecialized_nn_module\n"
      "  drop when name glob \"self.fc.*\" and guard_source.is_unspecialized_nn_module\n"
      "  keep when name == \"L['x']\"\n"
      "  default keep\n}\n")).diagnostics;
  std::vector<std::string> got;
  for (const Diagnostic& x : d.items()) {
    if (x.code == codes::kImpossibleName) got.push_back(x.range.ToString() + " " + x.help);
  }
  EXPECT_EQ(got, (std::vector<std::string>{
      "test.gpol:3:21 compare `path`, which spells it as named_modules() and named_parameters() do: "
      "`path == \"fc.weight\"` (docs/schema.md, \"Real names\")",
      "test.gpol:4:29 compare `path`, which spells it as named_modules() and named_parameters() do: "
      "`path startswith \"layers.0.\"` (docs/schema.md, \"Real names\")",
      "test.gpol:5:27 compare `path`, which spells it as named_modules() and named_parameters() do: "
      "`path == \"layers.0.attn\"` (docs/schema.md, \"Real names\")",
      "test.gpol:6:23 compare `path`, which spells it as named_modules() and named_parameters() do: "
      "`path glob \"fc.*\"` (docs/schema.md, \"Real names\")",
      "test.gpol:7:21 `L['x']` is named `x`; or compare `path` with `input:x` (docs/schema.md, \"Real names\")",
  })) << RenderText(d);
  // An attribute chain through a plain object is a name torch produces (GPT-2's and Llama's
  // `self.config.return_dict`): no warning. A parameter at the end still is module style.
  const Diagnostics c = loader.Lint(Src("guardpolicy 1\nunsafe policy p {\n"
                                        "  keep when name == \"self.config.return_dict\"\n"
                                        "  keep when name == \"self.norm.bias\"\n  default keep\n}\n"))
                            .diagnostics;
  std::vector<std::string> messages;
  for (const Diagnostic& x : c.items()) {
    if (x.code == codes::kImpossibleName) messages.push_back(x.message);
  }
  ASSERT_EQ(messages.size(), 1u) << RenderText(c);
  EXPECT_EQ(messages[0],
            "torch 2.13 names a submodule `self._modules['norm']`: if `norm` is a module, "
            "\"self.norm.bias\" matches none of its guards");
  // Names torch does produce, and prefixes that can start them, are left alone.
  EXPECT_EQ(Messages("unsafe policy p {\n"
                     "  drop when name == \"self._modules['fc']._parameters['weight']\" and not has_value\n"
                     "  drop when name in {\"self.scale\", \"self._modules['h']._modules['0']\"} and not has_value\n"
                     "  drop when name startswith \"self.layers\" and not has_value\n"
                     "  drop when name glob \"self.layers[0-9].*\" and not has_value\n"
                     "  drop when name contains \"self.fc.\" and not has_value\n"
                     "  drop when path == \"self.fc.weight\" and not has_value\n"
                     "  default keep\n}\n"),
            (std::vector<std::string>{}));
}

}  // namespace
}  // namespace guardpolicy
