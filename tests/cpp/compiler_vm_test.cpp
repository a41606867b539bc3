// compiler_vm_test.cpp: compiled programs decide like the policy text says.
#include <gtest/gtest.h>

#include <re2/re2.h>

#include <random>

#include "guardpolicy/diag_codes.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Entry;
using testing::Src;

std::shared_ptr<const CompiledPolicy> Compile(const std::string& body, const ParamValues& params = {},
                                              const std::string& name = "") {
  Loader loader = testing::MakeLoader();
  return loader.Load(Src("guardpolicy 1\n" + body), name, params);
}

Entry Guard(std::string_view type, std::string_view source = "LOCAL") {
  Entry e;
  e.Enum("guard_type", "GuardType", type).Enum("guard_source", "GuardSource", source);
  return e;
}

TEST(CompilerVm, KeepTensorGuardsMatchesTorchSemantics) {
  Loader loader = testing::MakeLoader();
  auto path = testing::kDataDir + "/std/keep_tensor_guards.gpol";
  auto p = loader.Load(SourceFileFromPath(path), "", {});
  const Program& prog = p->program();
  EXPECT_EQ(prog.image().fields, (std::vector<std::string>{"guard_type", "value.is_parameter"}));
  auto tensor = Guard("TENSOR_MATCH");
  EXPECT_EQ(tensor.Bool("value.is_parameter", false).Run(prog).decision, Decision::kKeep);
  EXPECT_EQ(tensor.Bool("value.is_parameter", true).Run(prog).decision, Decision::kDrop);
  EXPECT_EQ(Guard("ID_MATCH").Run(prog).decision, Decision::kDrop);
  EXPECT_EQ(Guard("SHAPE_ENV").Run(prog).decision, Decision::kDrop);

  Literal yes;
  yes.kind = Literal::Kind::kBool;
  yes.b = true;
  auto with_params = loader.Load(SourceFileFromPath(path), "", {{"keep_parameters", yes}});
  EXPECT_EQ(tensor.Bool("value.is_parameter", true).Run(with_params->program()).decision, Decision::kKeep);
}

TEST(CompilerVm, FirstMatchingRuleDecidesAndReportsItsRule) {
  auto p = Compile(
      "unsafe policy p {\n"
      "  keep when guard_type == SHAPE_ENV\n"
      "  drop when guard_source in {LOCAL_UNSPECIALIZED_NN_MODULE, GLOBAL}\n"
      "  drop when name startswith \"self.\" and not (name endswith \".eps\")\n"
      "  default keep\n"
      "}\n");
  const Program& prog = p->program();
  Outcome o = Guard("SHAPE_ENV", "GLOBAL").Run(prog);
  EXPECT_EQ(o.decision, Decision::kKeep);
  EXPECT_EQ(o.rule, 0);
  EXPECT_EQ(prog.image().rules[0].line, 3);
  o = Guard("ID_MATCH", "GLOBAL").Run(prog);
  EXPECT_EQ(o.decision, Decision::kDrop);
  EXPECT_EQ(o.rule, 1);
  EXPECT_EQ(Guard("ID_MATCH").Str("name", "self.fc").Run(prog).rule, 2);
  o = Guard("ID_MATCH").Str("name", "self.norm.eps").Run(prog);
  EXPECT_EQ(o.decision, Decision::kKeep);
  EXPECT_EQ(o.rule, -1);
}

TEST(CompilerVm, StringOperatorsRegexGlobAndSets) {
  auto p = Compile(
      "unsafe policy p {\n"
      "  drop when is_global and name matches \"^G\\\\['(CONFIG|FLAGS)'\\\\]\"\n"
      "  drop when name glob \"self.layers[0-9].*\"\n"
      "  drop when name contains \"cache\" or source.depth >= 5\n"
      "  drop when derived_guard_types contains ID_MATCH\n"
      "  drop when name in {\"a\", \"b\"} and source.depth not in {1, 2}\n"
      "}\n");
  const Program& prog = p->program();
  Entry g;
  g.Bool("is_global", true).Str("name", "G['CONFIG']");
  EXPECT_EQ(g.Run(prog).rule, 0);
  g.Str("name", "G['OTHER']");
  EXPECT_EQ(g.Run(prog).rule, -1);
  EXPECT_EQ(Entry().Str("name", "self.layers3.weight").Run(prog).rule, 1);
  EXPECT_EQ(Entry().Str("name", "self.layers.weight").Run(prog).rule, -1);
  EXPECT_EQ(Entry().Str("name", "kv_cache").Run(prog).rule, 2);
  EXPECT_EQ(Entry().Int("source.depth", 5).Run(prog).rule, 2);
  const int id_match = testing::TestSchema()->enums()[0].Find("ID_MATCH");
  EXPECT_EQ(Entry().Set("derived_guard_types", Value{0, uint64_t{1} << id_match, {}}).Run(prog).rule, 3);
  EXPECT_EQ(Entry().Str("name", "b").Int("source.depth", 3).Run(prog).rule, 4);
  EXPECT_EQ(Entry().Str("name", "b").Int("source.depth", 2).Run(prog).rule, -1);
}

TEST(CompilerVm, UnknownGuardTypesCompareByName) {
  auto p = Compile("unsafe policy p {\n  drop when guard_type in {_spyre_TENSOR_MATCH, ID_MATCH}\n}\n");
  Entry custom;
  custom.Set("guard_type", Value{-1, 0, "_spyre_TENSOR_MATCH"});
  EXPECT_EQ(custom.Run(p->program()).decision, Decision::kDrop);
  custom.Set("guard_type", Value{-1, 0, "_other"});
  EXPECT_EQ(custom.Run(p->program()).decision, Decision::kKeep);
}

TEST(CompilerVm, UseInlinesRulesButNotTheDefault) {
  auto p = Compile(
      "unsafe policy serving {\n"
      "  keep when guard_type == SHAPE_ENV\n"
      "  use skip_guard_on_globals\n"
      "  default keep\n"
      "}\n");
  const Program& prog = p->program();
  ASSERT_EQ(prog.image().rules.size(), 2u);
  EXPECT_EQ(prog.image().rules[1].policy, "skip_guard_on_globals");
  EXPECT_NE(prog.image().rules[1].file.find("std/skip_guard_on_globals.gpol"), std::string::npos);
  EXPECT_EQ(Guard("ID_MATCH").Bool("is_global", true).Run(prog).decision, Decision::kDrop);
  EXPECT_EQ(Guard("ID_MATCH").Bool("is_global", false).Run(prog).decision, Decision::kKeep);
}

TEST(CompilerVm, ParametersBindAtLoad) {
  auto p = Compile("unsafe policy p(prefix: string = \"self.\", depth: int = 2) {\n"
                   "  drop when name startswith prefix and source.depth > depth\n}\n");
  EXPECT_EQ(Entry().Str("name", "self.x").Int("source.depth", 3).Run(p->program()).decision, Decision::kDrop);
  Literal other;
  other.kind = Literal::Kind::kString;
  other.str = "model.";
  auto q = Compile("unsafe policy p(prefix: string = \"self.\") {\n  drop when name startswith prefix\n}\n",
                   {{"prefix", other}});
  EXPECT_EQ(Entry().Str("name", "self.x").Run(q->program()).decision, Decision::kKeep);
  EXPECT_EQ(Entry().Str("name", "model.x").Run(q->program()).decision, Decision::kDrop);
}

TEST(CompilerVm, LoadErrorsCarryAllDiagnostics) {
  try {
    Compile("unsafe policy p {\n  drop when nmae == 1\n  drop when guard_source == LOCALL\n}\n");
    FAIL() << "no error";
  } catch (const PolicyError& e) {
    ASSERT_EQ(e.diagnostics().size(), 2u);
    EXPECT_NE(std::string(e.what()).find("test.gpol:3:13: error[GP2001]"), std::string::npos) << e.what();
  }
}

TEST(CompilerVm, PolicySelectionAndParameterValues) {
  const std::string two = "unsafe policy a { default drop }\nunsafe policy b { default drop }\n";
  EXPECT_THROW(Compile(two), PolicyError);
  EXPECT_EQ(Compile(two, {}, "b")->name(), "b");
  try {
    Compile(two, {}, "c");
    FAIL();
  } catch (const PolicyError& e) {
    EXPECT_TRUE(testing::HasCode(e.diagnostics(), codes::kPolicySelection)) << e.what();
  }
  Literal wrong;
  wrong.kind = Literal::Kind::kInt;
  EXPECT_THROW(Compile("unsafe policy p(x: bool = false) { default drop }\n", {{"x", wrong}}), PolicyError);
  EXPECT_THROW(Compile("unsafe policy p(x: bool = false) { default drop }\n", {{"y", wrong}}), PolicyError);
}

TEST(CompilerVm, ConstantConditionsFoldToJumps) {
  auto p = Compile("unsafe policy p(on: bool = false) {\n  drop when on and is_global\n  drop when true\n}\n");
  const Program& prog = p->program();
  // `on` is false: rule 0 never loads is_global.
  EXPECT_TRUE(prog.image().fields.empty());
  EXPECT_EQ(Entry().Run(prog).rule, 1);
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

// The regex prefilter (RE2's FilteredRE2 atoms) must never reject a string RE2 matches,
// including case-sensitive patterns and strings with upper-case letters.
TEST(CompilerVm, RegexPrefilterAgreesWithRe2) {
  const std::vector<std::string> patterns = {
      "^[a-z]{2,8}$", "a{3}", "_[0-9]{1,2}$", "[\\]abcdefgh]+_weight", "^G\\['__import_torch",
      "_modules\\['(dropout|drop)'\\]", "\\.(eps|training)$", "[]x]y", "[^]a]b", "x[[:alpha:]]+y",
      "self\\.layers\\.[0-9]+\\.attn", "^a.b$", "ab+c", "ab?c", "ab*c", "(ab)c", "c(ab)*d", "Linear", "(?i)linear",
      "_modules\\['(dropout|drop|attn_dropout|resid_dropout)'\\]"};
  const std::vector<std::string> subjects = {
      "fc", "weight", "aaa", "layer_12", "fc_weight", "]_weight", "G['__import_torch_nn']",
      "self._modules['dropout']", "norm.eps", "]y", "xy", "bb", "xaby", "self.layers.3.attn", "a.b",
      "axb", "abbc", "ac", "abc", "cd", "cababd", "", "x_weight", "self.Linear", "self.LINEAR",
      "L['self']._modules['attn_dropout']", "L['self']._modules['DROP']"};
  for (const std::string& pattern : patterns) {
    const Program p = testing::RegexProgram({pattern});
    for (const std::string& s : subjects) {
      EXPECT_EQ(vm_internal::Matches(p, 0, s), RE2::PartialMatch(s, p.regex(0)))
          << "pattern " << pattern << " on " << s << " (" << p.regex_filter(0).atoms.size() << " atoms)";
    }
  }
}

TEST(CompilerVm, RegexPrefilterAgreesWithRe2OnRandomPatterns) {
  const std::vector<std::string> pieces = {"a", "b", "_", ".", "\\.", "[ab]", "[^a]", "[\\]a]", "(a|b)", "a*",
                                           "b+", "c?", "{2}", "{1,3}", "^", "$", "\\[", "ab", "(ab)+", "]"};
  std::mt19937 rng(1129);
  int compared = 0;
  for (int n = 0; n < 3000; ++n) {
    std::string pattern;
    for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) pattern += pieces[rng() % pieces.size()];
    std::optional<Program> linked;
    try {
      linked = testing::RegexProgram({pattern});
    } catch (const LinkError& e) {
      ASSERT_EQ(e.kind(), LinkError::Kind::kBadRegex) << pattern;
      continue;  // not a valid RE2 pattern
    }
    const Program& p = *linked;
    for (int j = 0; j < 40; ++j) {
      std::string subject;
      for (int k = static_cast<int>(rng() % 8); k > 0; --k) subject += "ab_.]c["[rng() % 7];
      ASSERT_EQ(vm_internal::Matches(p, 0, subject), RE2::PartialMatch(subject, p.regex(0)))
          << "pattern " << pattern << " on " << subject << " (" << p.regex_filter(0).atoms.size() << " atoms)";
      ++compared;
    }
  }
  EXPECT_GT(compared, 50000);
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

// Find (the 16-positions-at-a-time search, with its overlapping last block) agrees with
// std::string_view::find on every start position, around every block boundary.
TEST(StringTests, FindAgreesWithStringViewFind) {
  std::mt19937 rng(20261129);
  const std::string alphabet = "ab_.]";
  auto text = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  int compared = 0, found = 0;
  for (size_t hay_size = 0; hay_size <= 70; ++hay_size) {
    for (int trial = 0; trial < 30; ++trial) {
      const std::string hay = text(hay_size);
      const size_t n = rng() % 21;  // up to 20: SameBytes's word compares too
      // A needle from the haystack half the time, so there is something to find.
      const std::string needle = hay_size >= n && trial % 2 ? hay.substr(rng() % (hay_size - n + 1), n) : text(n);
      for (size_t from = 0; from <= hay_size + 1; ++from) {
        const size_t want = std::string_view(hay).find(needle, from);
        ASSERT_EQ(vm_internal::Find(hay, needle, from), want) << "'" << needle << "' in '" << hay << "' from " << from;
        ++compared;
        found += want != std::string_view::npos;
      }
      EXPECT_EQ(vm_internal::Contains(hay, needle), hay.find(needle) != std::string::npos);
    }
  }
  EXPECT_GT(found, compared / 4);
}

// type_dispatch's specialized layout: one jump table sends each class of guard types to a
// copy of just the rules that admit it, and known_enum_values folds the guard_type tests
// that the copy makes certain; every guard type (and a name outside the schema) decides
// as at -O0.
TEST(Optimizer, GuardTypeClassesGetTheirOwnCopyOfTheirRules) {
  const std::string body =
      "unsafe policy p {\n"
      "  keep when guard_type in {GLOBAL_STATE, SHAPE_ENV}\n"
      "  drop when guard_type == TENSOR_MATCH and value.is_parameter\n"
      "  keep when guard_type == TENSOR_MATCH\n"
      "  drop when is_global\n"
      "  drop when guard_type == TYPE_MATCH and name endswith \"._parameters\"\n"
      "  drop when guard_type in {ID_MATCH, _vendor_MATCH} and source.depth > 2\n"
      "  default keep\n}\n";
  auto o1 = Compile(body);
  CompileOptions opts;
  opts.opt_level = 0;
  Loader loader0(testing::TestSchema(), testing::kDataDir + "/std", opts);
  auto o0 = loader0.Load(Src("guardpolicy 1\n" + body), "", {});
  const Program& prog = o1->program();
  ASSERT_EQ(prog.image().code[0].op, Opcode::kDispatch);
  int dispatches = 0, guard_type_tests = 0;
  const int32_t guard_type = static_cast<int32_t>(std::find(prog.image().fields.begin(), prog.image().fields.end(), "guard_type") -
                                                  prog.image().fields.begin());
  for (const Instruction& ins : prog.image().code) {
    dispatches += ins.op == Opcode::kDispatch;
    guard_type_tests += (ins.op == Opcode::kBranchCompare || ins.op == Opcode::kBranchInSet) && ins.a == guard_type;
  }
  EXPECT_EQ(dispatches, 1);
  // Only `_vendor_MATCH` stays a test: a name outside the schema is never assumed equal.
  EXPECT_EQ(guard_type_tests, 1);
  const auto& members = testing::TestSchema()->enums()[testing::TestSchema()->FindEnum("GuardType")].members;
  std::vector<std::string> types(members.begin(), members.end());
  types.push_back("_vendor_MATCH");
  types.push_back("_vendor_OTHER");
  for (const std::string& type : types) {
    for (int bits = 0; bits < 8; ++bits) {
      Entry e = Guard(type);
      e.Bool("value.is_parameter", bits & 1).Bool("is_global", bits & 2).Int("source.depth", bits & 4 ? 3 : 1);
      e.Str("name", bits & 1 ? "self._modules['fc']._parameters" : "x");
      const Outcome a = e.Run(prog), b = e.Run(o0->program());
      EXPECT_EQ(a.decision, b.decision) << type << " " << bits;
      EXPECT_EQ(a.rule, b.rule) << type << " " << bits;
    }
  }
}

// When copies would grow the code too much, each rule gets its own DISPATCH instead.
TEST(Optimizer, TooManyCopiesFallBackToOneDispatchPerRule) {
  const auto& members = testing::TestSchema()->enums()[testing::TestSchema()->FindEnum("GuardType")].members;
  std::string body = "unsafe policy p {\n";
  for (size_t i = 0; i < 30 && i < members.size(); ++i) {
    body += "  drop when guard_type == " + members[i] + " and name contains \"n" + std::to_string(i) + "\"\n";
  }
  for (int i = 0; i < 20; ++i) body += "  drop when name endswith \"e" + std::to_string(i) + "\" and is_global\n";
  body += "  default keep\n}\n";
  auto p = Compile(body);
  const Program& prog = p->program();
  // 31 classes x 20 shared rules would be about 2,000 instructions; per-rule tables keep the
  // code near its -O0 size (known_enum_values then turns most of them into jumps).
  EXPECT_LT(prog.image().code.size(), 400u);
  for (size_t i = 0; i < 30 && i < members.size(); ++i) {
    Entry e = Guard(members[i]);
    const std::string name = "xn" + std::to_string(i) + "e3";  // Entry keeps a view
    e.Str("name", name).Bool("is_global", true);
    EXPECT_EQ(e.Run(prog).rule, static_cast<int>(i)) << members[i];
    e.Str("name", "xe3");
    EXPECT_EQ(e.Run(prog).rule, 33) << members[i];
  }
}

}  // namespace
}  // namespace guardpolicy
