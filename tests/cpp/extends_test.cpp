// extends_test.cpp: `policy fix extends BASE { ... }` (docs/language.md, "Extending a policy"):
// the grammar, the linker's order and inheritance, the checker's diagnostics, the formatter;
// and the config knobs' risks (schema `risks`, GP2021) and least values (GP2010).
#include <gtest/gtest.h>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/formatter.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/parser.h"
#include "guardpolicy/snapshot.h"
#include "reference_interpreter.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Codes;
using testing::Entry;
using testing::ErrorCodes;
using testing::FieldValues;
using testing::Src;

// The storm fix of issue 54: one drop on top of the safe setting.
const char kFix[] =
    "guardpolicy 1\n"
    "unsafe policy fix extends watch_state {\n"
    "  drop when name == \"opts['run_id']\"\n"
    "  config allow_unspec_int_on_nn_module = true\n"
    "}\n";

// The first error of `ds` (the analysis' warnings may come before it).
const Diagnostic& FirstError(const Diagnostics& ds) {
  for (const Diagnostic& d : ds.items()) {
    if (d.severity == Severity::kError) return d;
  }
  static const Diagnostic none;
  return none;
}

Entry Named(std::string_view name, std::string_view type, std::string_view source) {
  Entry e;
  e.Enum("guard_type", "GuardType", type)
      .Enum("guard_source", "GuardSource", source)
      .Str("name", name);
  return e;
}

TEST(Extends, ParsesAsAUseOfTheBaseWithItsArgumentsAndRange) {
  auto r =
      Parse(Src("guardpolicy 1\npolicy p(a: bool = true) extends base(flag = false, n = 2) { keep "
                "when a }\n"));
  ASSERT_TRUE(r.diagnostics.empty()) << RenderText(r.diagnostics);
  const PolicyDecl& p = r.module->policies.at(0);
  ASSERT_TRUE(p.extends.has_value());
  EXPECT_EQ(p.extends->target, "base");
  ASSERT_EQ(p.extends->args.size(), 2u);
  EXPECT_EQ(p.extends->args[1].name, "n");
  EXPECT_EQ(p.extends->args[1].value.i, 2);
  EXPECT_EQ(p.extends->range.ToString(), "test.gpol:2:26");
  EXPECT_EQ(p.items.size(), 1u);  // the clause is no item
  EXPECT_FALSE(
      Parse(Src("guardpolicy 1\npolicy p { }\n")).module->policies.at(0).extends.has_value());
}

TEST(Extends, IsAKeywordAndTakesOneBase) {
  auto named = Parse(Src("guardpolicy 1\npolicy extends { }\n"));
  ASSERT_FALSE(named.diagnostics.empty());
  EXPECT_EQ(named.diagnostics.items()[0].code, codes::kSyntax);
  EXPECT_EQ(named.diagnostics.items()[0].range.ToString(), "test.gpol:2:8");
  auto two = Parse(Src("guardpolicy 1\npolicy p extends a extends b { }\n"));
  EXPECT_EQ(Codes(two.diagnostics), std::vector<std::string>{codes::kSyntax});
}

TEST(Extends, OwnRulesFirstThenTheBasesAndItsDefaultAndLines) {
  Loader loader = testing::MakeLoader();
  auto lint = loader.Lint(Src(kFix, "fix.gpol"));
  EXPECT_FALSE(lint.diagnostics.HasErrors()) << RenderText(lint.diagnostics);
  auto fix = loader.Load(Src(kFix, "fix.gpol"), "fix", {});
  const ProgramImage& image = fix->program().image();
  ASSERT_EQ(image.rules.size(), 3u);  // its drop, then watch_state's two keeps
  EXPECT_EQ(image.rules[0].policy, "fix");
  EXPECT_EQ(image.rules[0].file, "fix.gpol");
  EXPECT_EQ(image.rules[0].line, 3);
  for (size_t i = 1; i < 3; ++i) {  // a base rule is reported where the base wrote it
    EXPECT_EQ(image.rules[i].policy, "watch_state");
    EXPECT_EQ(image.rules[i].file, testing::kDataDir + "/std/watch_state.gpol");
    EXPECT_EQ(image.rules[i].line, 5 + static_cast<int>(i)) << i;
  }
  EXPECT_EQ(image.default_decision,
            Decision::kWatch);  // watch_state's `default watch`, at its line
  EXPECT_EQ(image.default_file, testing::kDataDir + "/std/watch_state.gpol");
  EXPECT_EQ(image.default_line, 8);

  EXPECT_EQ(Named("opts['run_id']", "EQUALS_MATCH", "LOCAL").Run(fix->program()).decision,
            Decision::kDrop);
  EXPECT_EQ(Named("x", "TENSOR_MATCH", "LOCAL").Run(fix->program()).decision, Decision::kKeep);
  EXPECT_EQ(
      Named("self.n", "EQUALS_MATCH", "LOCAL_UNSPECIALIZED_NN_MODULE").Run(fix->program()).decision,
      Decision::kWatch);

  // Its own config knob, then watch_state's knob and dispatch line.
  const RuntimeSettings& rt = fix->runtime();
  ASSERT_EQ(rt.config.size(), 2u);
  EXPECT_EQ(rt.config[0].knob, "allow_unspec_int_on_nn_module");
  EXPECT_EQ(rt.config[1].knob, "install_free_tensors");
  ASSERT_TRUE(rt.dispatch.has_value());
  EXPECT_EQ(rt.dispatch->mode, "direct");
  EXPECT_TRUE(fix->meta().is_unsafe);
}

TEST(Extends, EachLineOverridesTheBasesLineOfItsKindAndAKnobItsKnob) {
  const std::string text =
      "guardpolicy 1\n"
      "unsafe policy base {\n"
      "  drop when is_global\n"
      "  default drop\n"
      "  config specialize_float = false\n"
      "  config recompile_limit = 16\n"
      "  verify every 10 calls\n"
      "  on_violation warn\n"
      "  stance skip_guard_eval_unsafe after 4 calls\n"
      "}\n"
      "unsafe policy mid extends base { config recompile_limit = 4\n  verify every 20 calls }\n"
      "unsafe policy top extends mid { default keep\n  on_violation raise }\n";
  Loader loader = testing::MakeLoader();
  auto lint = loader.Lint(Src(text));
  EXPECT_FALSE(lint.diagnostics.HasErrors()) << RenderText(lint.diagnostics);
  const PolicyDecl& top = lint.module->policies.at(2);
  const Inherited in = Inherit(top, loader);
  ASSERT_EQ(in.chain.size(), 3u);
  EXPECT_EQ(in.EffectiveDefault(), Decision::kKeep);
  EXPECT_EQ(in.default_owner, &top);
  ASSERT_EQ(in.runtime.config.size(), 2u);
  EXPECT_EQ(in.runtime.config[0].knob, "recompile_limit");
  EXPECT_EQ(in.runtime.config[0].value.i, 4);  // mid's, over base's 16
  EXPECT_EQ(in.runtime.config[1].knob, "specialize_float");
  EXPECT_EQ(in.runtime.verify->every_calls, 20);
  EXPECT_EQ(in.runtime.on_violation->action, "raise");
  EXPECT_EQ(in.runtime.stance->after_calls, 4);
  const Inherited mid = Inherit(lint.module->policies.at(1), loader);
  EXPECT_EQ(mid.EffectiveDefault(), Decision::kDrop);
  EXPECT_EQ(mid.default_owner, &lint.module->policies.at(0));

  auto loaded = loader.Load(Src(text), "top", {});
  EXPECT_EQ(loaded->runtime().on_violation->action, "raise");
  EXPECT_EQ(loaded->runtime().verify->every_calls, 20);
  EXPECT_EQ(Entry().Bool("is_global", true).Run(loaded->program()).decision,
            Decision::kDrop);  // base's rule
  EXPECT_EQ(Entry().Bool("is_global", false).Run(loaded->program()).decision,
            Decision::kKeep);  // top's default
}

TEST(Extends, TheBasesParametersTakeTheArgumentsOverTheirDefaults) {
  const std::string text =
      "guardpolicy 1\n"
      "unsafe policy base(src: GuardSource = \"LOCAL\", on: bool) { drop when on and guard_source "
      "== src }\n"
      "unsafe policy p extends base(on = true, src = \"GLOBAL\") { keep when is_global and name == "
      "\"G['k']\" }\n";
  Loader loader = testing::MakeLoader();
  auto lint = loader.Lint(Src(text));
  EXPECT_FALSE(lint.diagnostics.HasErrors()) << RenderText(lint.diagnostics);
  auto p = loader.Load(Src(text), "p", {});
  EXPECT_EQ(Named("G['x']", "ID_MATCH", "GLOBAL").Run(p->program()).decision, Decision::kDrop);
  EXPECT_EQ(
      Named("G['k']", "ID_MATCH", "GLOBAL").Bool("is_global", true).Run(p->program()).decision,
      Decision::kKeep);
  EXPECT_EQ(Named("x", "ID_MATCH", "LOCAL").Run(p->program()).decision, Decision::kKeep);

  auto missing =
      loader.Lint(Src("guardpolicy 1\nunsafe policy base(on: bool) { drop when on }\n"
                      "unsafe policy p extends base { }\n"));
  ASSERT_EQ(ErrorCodes(missing.diagnostics), std::vector<std::string>{codes::kBadParameter});
  EXPECT_EQ(FirstError(missing.diagnostics).message, "`use base` needs a value for parameter `on`");
}

TEST(Extends, UnknownBasesSelfAndCyclesAreTheUseDiagnostics) {
  Loader loader = testing::MakeLoader();
  auto unknown = loader.Lint(Src("guardpolicy 1\npolicy p extends watch_stat { }\n"));
  ASSERT_EQ(ErrorCodes(unknown.diagnostics), std::vector<std::string>{codes::kUnknownPolicy});
  EXPECT_EQ(FirstError(unknown.diagnostics).message, "unknown policy `watch_stat`");
  EXPECT_EQ(FirstError(unknown.diagnostics).help, "did you mean `watch_state`?");

  auto self = loader.Lint(Src("guardpolicy 1\npolicy p extends p { }\n"));
  ASSERT_EQ(ErrorCodes(self.diagnostics), std::vector<std::string>{codes::kUseCycle});
  EXPECT_EQ(FirstError(self.diagnostics).message, "policy `p` extends itself");

  auto cycle = loader.Lint(Src("guardpolicy 1\npolicy a extends b { }\npolicy b { use a }\n"));
  ASSERT_EQ(ErrorCodes(cycle.diagnostics), std::vector<std::string>{codes::kUseCycle});
  EXPECT_EQ(FirstError(cycle.diagnostics).message, "`use a` forms a cycle back to `a`");
  auto cycle2 = loader.Lint(Src("guardpolicy 1\npolicy a extends b { }\npolicy b extends a { }\n"));
  ASSERT_EQ(ErrorCodes(cycle2.diagnostics), std::vector<std::string>{codes::kUseCycle});
  EXPECT_EQ(FirstError(cycle2.diagnostics).message, "`extends a` forms a cycle back to `a`");
  // Inheritance stops where the chain comes back (no endless walk).
  EXPECT_EQ(Inherit(cycle2.module->policies.at(0), loader).chain.size(), 2u);
}

TEST(Extends, APolicyThatCanDropThroughItsBaseMustBeUnsafe) {
  Loader loader = testing::MakeLoader();
  auto drops = loader.Lint(Src("guardpolicy 1\npolicy p extends skip_all_guards { }\n"));
  ASSERT_EQ(ErrorCodes(drops.diagnostics), std::vector<std::string>{codes::kDropsWithoutUnsafe});
  EXPECT_EQ(FirstError(drops.diagnostics).message,
            "policy `p` can drop guards but is not marked `unsafe`");

  auto own_drop = loader.Lint(
      Src("guardpolicy 1\npolicy fix extends watch_state { drop when name == \"n\" }\n"));
  EXPECT_EQ(ErrorCodes(own_drop.diagnostics), std::vector<std::string>{codes::kDropsWithoutUnsafe});

  // watch_state's default watch and free tensors are inherited: no drop, no unwatched tensor.
  auto keeps = loader.Lint(
      Src("guardpolicy 1\npolicy fix extends watch_state { keep when name == \"n\" }\n"));
  EXPECT_FALSE(keeps.diagnostics.HasErrors()) << RenderText(keeps.diagnostics);
  auto never = loader.Lint(
      Src("guardpolicy 1\nunsafe policy fix extends watch_state { keep when name == \"n\" }\n"));
  EXPECT_TRUE(testing::HasCode(never.diagnostics, codes::kUnsafeNeverDrops))
      << RenderText(never.diagnostics);

  // `default keep` over watch_state's `default watch` leaves its installed tensors unwatched:
  // reported at the `extends` clause, where the line comes from.
  auto unwatched =
      loader.Lint(Src("guardpolicy 1\npolicy fix extends watch_state { default keep }\n"));
  ASSERT_EQ(ErrorCodes(unwatched.diagnostics),
            std::vector<std::string>{codes::kDropsWithoutUnsafe});
  EXPECT_EQ(FirstError(unwatched.diagnostics).range.ToString(), "test.gpol:2:12");

  // A base's stance makes the extending policy skip guard evaluation too.
  auto stance = loader.Lint(
      Src("guardpolicy 1\nunsafe policy base { stance skip_guard_eval_unsafe after 2 calls\n"
          "  drop when is_global }\npolicy p extends base { }\n"));
  ASSERT_EQ(ErrorCodes(stance.diagnostics), std::vector<std::string>{codes::kDropsWithoutUnsafe});
  EXPECT_EQ(FirstError(stance.diagnostics).range.ToString(), "test.gpol:4:10");
}

TEST(Extends, LinesThatNeedAnotherLineFindItInTheBase) {
  Loader loader = testing::MakeLoader();
  auto ok = loader.Lint(
      Src("guardpolicy 1\nunsafe policy base { verify every 5 calls\n"
          "  stance skip_guard_eval_unsafe after 2 calls\n  drop when is_global }\n"
          "unsafe policy p extends base { on_violation raise\n  on_recompile warn }\n"));
  EXPECT_FALSE(ok.diagnostics.HasErrors()) << RenderText(ok.diagnostics);
  auto bad = loader.Lint(
      Src("guardpolicy 1\nunsafe policy p extends skip_all_guards { on_violation raise }\n"));
  EXPECT_EQ(ErrorCodes(bad.diagnostics), std::vector<std::string>{codes::kBadVerify});
}

// An entry of every schema field, zero or empty but these.
FieldValues EntryOf(std::string_view name, std::string_view source, bool global) {
  const Schema& s = *testing::TestSchema();
  FieldValues v;
  for (const FieldInfo& f : s.fields()) v[f.name] = Value{0, 0, {}};
  const auto& sources = s.enums()[s.FindEnum("GuardSource")];
  const auto& types = s.enums()[s.FindEnum("GuardType")];
  v["name"] = Value{0, 0, name};
  v["guard_source"] = Value{sources.Find(source), 0, source};
  v["guard_type"] = Value{types.Find("ID_MATCH"), 0, "ID_MATCH"};
  v["is_global"] = Value{global ? 1 : 0, 0, {}};
  return v;
}

TEST(Extends, TheVmDecidesAsTheReferenceInterpreterOverTheChain) {
  const std::string text =
      "guardpolicy 1\n"
      "unsafe policy base(flag: bool = false) {\n"
      "  keep when flag and is_global and name == \"G['k']\"\n"
      "  use skip_guard_on_globals\n"
      "  watch when guard_source == LOCAL_UNSPECIALIZED_NN_MODULE\n"
      "  default drop\n"
      "}\n"
      "unsafe policy mid extends base(flag = true) { keep when name startswith \"G['keep\" }\n"
      "unsafe policy top extends mid { drop when name == \"x\"\n  default keep }\n";
  Loader loader = testing::MakeLoader();
  auto lint = loader.Lint(Src(text));
  ASSERT_FALSE(lint.diagnostics.HasErrors()) << RenderText(lint.diagnostics);
  testing::ReferenceInterpreter reference(*testing::TestSchema(), loader);
  std::map<std::string, int> decided;
  for (const char* policy : {"base", "mid", "top"}) {
    auto p = loader.Load(Src(text), policy, {});
    for (const char* name : {"x", "G['keep_me']", "G['k']", "G['other']", "self.n"}) {
      for (const char* source : {"LOCAL", "GLOBAL", "LOCAL_UNSPECIALIZED_NN_MODULE"}) {
        for (const bool global : {false, true}) {
          SCOPED_TRACE(std::string(policy) + " " + name + " " + source + (global ? " global" : ""));
          const FieldValues entry = EntryOf(name, source, global);
          const Outcome want = reference.Run(*lint.module->FindPolicy(policy), {}, entry);
          const Outcome got = Evaluate(p->program(), Snapshot::View(p->program(), entry).data());
          EXPECT_EQ(got.decision, want.decision);
          EXPECT_EQ(got.rule, want.rule);
          ++decided[std::string(policy) + DecisionName(got.decision)];
        }
      }
    }
  }
  // Each policy decides all three ways somewhere (the chain's rules and defaults all reached),
  // and only `top`'s own default keeps what no rule decides.
  EXPECT_GT(decided["middrop"], 0);
  EXPECT_GT(decided["midwatch"], 0);
  EXPECT_GT(decided["topdrop"], 0);
  EXPECT_GT(decided["topwatch"], 0);
  EXPECT_GT(decided["topkeep"], decided["midkeep"]);
}

TEST(Extends, FormatsTheClauseAndRoundTrips) {
  const std::string text =
      "guardpolicy 1\n"
      "unsafe   policy fix(a: bool = true)   extends   base ( flag=false ) {\n"
      "  drop when a\n"
      "}\n"
      "policy base(flag: bool = true) { keep when flag }\n"
      "policy plain extends base{ }\n";
  FormatResult r = Format(Src(text));
  ASSERT_TRUE(r.text.has_value()) << RenderText(r.diagnostics);
  EXPECT_EQ(*r.text,
            "guardpolicy 1\n\n"
            "unsafe policy fix(a: bool = true) extends base(flag = false) {\n"
            "  drop when a\n"
            "}\n\n"
            "policy base(flag: bool = true) {\n"
            "  keep when flag\n"
            "}\n\n"
            "policy plain extends base {\n"
            "}\n");
  EXPECT_EQ(Format(Src(*r.text)).text, r.text);

  // Comments beside the base's arguments stay beside them.
  const std::string commented =
      "guardpolicy 1\n"
      "policy p extends base(\n"
      "  flag = false,  # the base's flag\n"
      ") {\n"
      "}\n"
      "policy base(flag: bool = true) { keep when flag }\n";
  FormatResult c = Format(Src(commented));
  ASSERT_TRUE(c.text.has_value());
  EXPECT_NE(c.text->find("  flag = false,  # the base's flag\n"), std::string::npos) << *c.text;
  EXPECT_EQ(Format(Src(*c.text)).text, c.text);
}

TEST(ConfigKnobs, TheStormKnobsAreDeclaredWithTheirTypes) {
  const Schema& s = *testing::TestSchema();
  for (const char* knob : {"allow_unspec_int_on_nn_module", "automatic_dynamic_shapes",
                           "force_parameter_static_shapes", "specialize_float"}) {
    ASSERT_NE(s.FindConfig(knob), nullptr) << knob;
    EXPECT_EQ(s.FindConfig(knob)->type.kind, TypeKind::kBool) << knob;
  }
  const ConfigKnob* limit = s.FindConfig("recompile_limit");
  ASSERT_NE(limit, nullptr);
  EXPECT_EQ(limit->type.kind, TypeKind::kInt);
  EXPECT_EQ(limit->min, 1);
  ASSERT_EQ(limit->risks.size(), 1u);
  EXPECT_EQ(limit->risks[0].kind, ConfigRisk::Kind::kAbove);
  EXPECT_EQ(limit->risks[0].value.i, 64);
}

// The diagnostics of a policy with `lines` as its config lines.
Diagnostics ConfigLint(const std::string& lines) {
  Loader loader = testing::MakeLoader();
  return loader.Lint(Src("guardpolicy 1\npolicy p {\n" + lines + "}\n")).diagnostics;
}

TEST(ConfigKnobs, ARiskyValueIsAWarningWithTheSchemasText) {
  EXPECT_TRUE(
      ConfigLint("  config recompile_limit = 64\n  config allow_unspec_int_on_nn_module = true\n"
                 "  config automatic_dynamic_shapes = true\n  config force_parameter_static_shapes "
                 "= true\n"
                 "  config specialize_float = false\n")
          .empty());
  const Diagnostics high = ConfigLint("  config recompile_limit = 65\n");
  ASSERT_EQ(Codes(high), std::vector<std::string>{codes::kConfigRisk});
  EXPECT_EQ(high.items()[0].severity, Severity::kWarning);
  EXPECT_EQ(high.items()[0].message, "`config recompile_limit = 65` hides a recompile storm");
  EXPECT_NE(high.items()[0].help.find("one more guard check on every miss"), std::string::npos);
  EXPECT_EQ(high.items()[0].range.ToString(), "test.gpol:3:3");

  const Diagnostics flags = ConfigLint(
      "  config automatic_dynamic_shapes = false\n"
      "  config force_parameter_static_shapes = false\n  config specialize_float = true\n");
  ASSERT_EQ(Codes(flags),
            (std::vector<std::string>{codes::kConfigRisk, codes::kConfigRisk, codes::kConfigRisk}));
  EXPECT_EQ(flags.items()[0].message,
            "`config automatic_dynamic_shapes = false` compiles anew for every new input size");
  EXPECT_EQ(
      flags.items()[1].message,
      "`config force_parameter_static_shapes = false` lets parameters' shapes become symbols");
  EXPECT_EQ(flags.items()[2].message,
            "`config specialize_float = true` compiles anew for every new value of a float "
            "argument or attribute");
}

TEST(ConfigKnobs, ALimitBelowItsLeastValueIsAnError) {
  const Diagnostics zero = ConfigLint("  config recompile_limit = 0\n");
  ASSERT_EQ(Codes(zero), std::vector<std::string>{codes::kUnknownConfig});
  EXPECT_EQ(zero.items()[0].message, "`config recompile_limit` is 0, below its least value 1");
  EXPECT_EQ(zero.items()[0].range.ToString(), "test.gpol:3:28");
  EXPECT_EQ(ErrorCodes(ConfigLint("  config recompile_limit = true\n")),
            std::vector<std::string>{codes::kBadParameter});
  EXPECT_EQ(ErrorCodes(ConfigLint("  config recompile_limit = 1\n  config recompile_limit = 2\n")),
            std::vector<std::string>{codes::kDuplicateItem});
}

TEST(ConfigKnobs, AnInheritedRiskIsTheBasesToReport) {
  Loader loader = testing::MakeLoader();
  auto lint =
      loader.Lint(Src("guardpolicy 1\npolicy base { config recompile_limit = 100 }\n"
                      "policy p extends base { config specialize_float = false }\n"));
  ASSERT_EQ(Codes(lint.diagnostics), std::vector<std::string>{codes::kConfigRisk});
  EXPECT_EQ(lint.diagnostics.items()[0].range.ToString(), "test.gpol:2:15");
}

TEST(ConfigKnobs, RisksAndLeastValuesAreCheckedWhenTheSchemaLoads) {
  const std::string head =
      "fields:\n  name:\n    type: string\n    doc: d\n    from: f\nconfig:\n  k:\n";
  EXPECT_NO_THROW(Schema::FromYaml(
      head + "    type: int\n    min: 1\n    risks:\n      - above: 3\n        text: t\n", "s"));
  EXPECT_THROW(Schema::FromYaml(head + "    type: bool\n    min: 1\n", "s"), SchemaError);
  EXPECT_THROW(Schema::FromYaml(
                   head + "    type: bool\n    risks:\n      - above: 3\n        text: t\n", "s"),
               SchemaError);
  EXPECT_THROW(Schema::FromYaml(
                   head + "    type: bool\n    risks:\n      - equals: 3\n        text: t\n", "s"),
               SchemaError);
  EXPECT_THROW(Schema::FromYaml(head + "    type: bool\n    risks:\n      - equals: true\n", "s"),
               SchemaError);
}

}  // namespace
}  // namespace guardpolicy
