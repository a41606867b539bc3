// plugin_test.cpp: the plugin ABI, the loader, the schema extension and plugin calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>

#include "guardpolicy/artifact.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/extension_host.h"
#include "guardpolicy/plugin_loader.h"
#include "guardpolicy/registry.h"
#include "test_util.h"

extern "C" size_t gp_test_c_table_size(void);
extern "C" size_t gp_test_c_view_size(void);
extern "C" size_t gp_test_c_value_size(void);

namespace guardpolicy {
namespace {

using testing::Src;
using testing::TestSchema;

const std::string kBad = GUARDPOLICY_TEST_PLUGIN_DIR;
const std::string kExamples = GUARDPOLICY_EXAMPLE_PLUGIN_DIR;

// The PluginError message of loading `path` (and adding it to the schema), or "".
std::string LoadError(const std::string& path) {
  try {
    (void)TestSchema()->WithPlugin(LoadPlugin(path));
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

Schema WithExamples() { return *testing::PluginSchema(); }

TEST(PluginApi, HeaderHasTheSameLayoutInCAndCpp) {
  EXPECT_EQ(gp_test_c_table_size(), sizeof(gp_plugin_api));
  EXPECT_EQ(gp_test_c_view_size(), sizeof(gp_entry_view));
  EXPECT_EQ(gp_test_c_value_size(), sizeof(gp_value));
}

TEST(PluginLoader, EveryBadPluginIsAClearErrorAndTheProcessGoesOn) {
  const std::string text_file = ::testing::TempDir() + "not_a_plugin.so";
  std::ofstream(text_file) << std::string(200, '#') << "\nthis is text, not an ELF shared library\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/nonexistent/libx.so", "/nonexistent/libx.so: cannot load the plugin: /nonexistent/libx.so: cannot open shared object file"},
      {text_file, "cannot load the plugin: " + text_file + ": invalid ELF header"},
      {kBad + "/no_entry.so", "no_entry.so: not a guardpolicy plugin: no `gp_plugin_get_api` symbol"},
      {kBad + "/null_table.so", "null_table.so: `gp_plugin_get_api` returned no table"},
      {kBad + "/major.so", "major.so: plugin ABI 2.0 is not supported by this guardpolicy (ABI 1.0"},
      {kBad + "/minor.so", "minor.so: plugin ABI 1.99 is not supported by this guardpolicy (ABI 1.0"},
      {kBad + "/small_table.so", "small_table.so: the plugin table is 16 bytes, smaller than an ABI 1.0 table"},
      {kBad + "/name.so", "name.so: plugin name `Bad-Name` is not [a-z_][a-z0-9_]*"},
      {kBad + "/type.so", "type.so: plugin `good`: field `good.flag`: unknown type `float`"},
      {kBad + "/duplicate.so", "duplicate.so: plugin `good` declares `twice` twice"},
      {kBad + "/clash.so", "clash.so: plugin `guard_source`: the name clashes with the schema field `guard_source`"},
      {kBad + "/reads.so", "reads.so: plugin `good`: field `good.flag`: reads `nosuch.field`, which is not a core schema field"},
      {kBad + "/init.so", "init.so: plugin `good` failed to initialize: the bad plugin failed on purpose"},
      {kBad + "/keyword.so", "keyword.so: plugin name `when` is not [a-z_][a-z0-9_]* (at most 64 bytes, not a keyword)"},
      {kBad + "/text.so", "text.so: plugin `good`: field doc is not UTF-8 (byte 2)"},
      {kBad + "/args.so", "args.so: plugin `good`: function `one` has 17 arguments, over the limit of 16"},
      {"", "cannot load a plugin from an empty path"},
  };
  for (const auto& [path, expected] : cases) {
    const std::string error = LoadError(path);
    EXPECT_NE(error.find(expected), std::string::npos) << path << "\n  got: " << error;
  }
  // And a good plugin still loads afterwards.
  EXPECT_EQ(LoadError(kBad + "/good.so"), "");
  // A bare file name is a file in the working directory, never a library search.
  const std::string bare = LoadError("libz.so.1");
  EXPECT_NE(bare.find("./libz.so.1: cannot load the plugin: ./libz.so.1: cannot open shared object file"), std::string::npos)
      << bare;
}

TEST(PluginLoader, NamesMustBeNewAcrossPlugins) {
  const Schema one = TestSchema()->WithPlugin(LoadPlugin(kBad + "/good.so"));
  try {
    (void)one.WithPlugin(LoadPlugin(kBad + "/good.so"));
    FAIL();
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("plugin `good`: a plugin with this name is already loaded"), std::string::npos);
  }
  EXPECT_THROW((void)TestSchema()->WithPlugin(Plugin::FromTable(nullptr, "in-process")), PluginError);
}

TEST(PluginLoader, BuiltinFiltersAreInEverySchemaFile) {
  const Schema& s = *TestSchema();
  ASSERT_NE(s.FindPlugin("builtin"), nullptr);
  for (const char* name : {"skip_guard_on_inbuilt_nn_modules", "skip_guard_on_all_nn_modules", "keep_tensor_guards",
                           "skip_guard_on_globals", "skip_all_guards", "keep_portable_guards"}) {
    const int f = s.FindFunction(std::string("builtin.") + name);
    ASSERT_GE(f, 0) << name;
    EXPECT_TRUE(s.functions()[f].is_filter);
  }
  // A reduced schema that lacks the fields they read has no built-ins.
  EXPECT_EQ(Schema::FromYaml("fields:\n  name:\n    type: string\n    doc: d\n    from: f\n", "s").FindPlugin("builtin"),
            nullptr);
}

TEST(PluginCalls, ExampleFieldsFunctionsAndFiltersTypeCheckAndRun) {
  auto schema = std::make_shared<const Schema>(WithExamples());
  Loader loader(schema, testing::kDataDir + "/std");
  // A misspelt plugin field gets a did-you-mean.
  LintResult bad = loader.Lint(Src("guardpolicy 1\nunsafe policy p { drop when modinfo.clas_name == \"Linear\" }\n"));
  ASSERT_EQ(bad.diagnostics.items().size(), 1u);
  EXPECT_EQ(bad.diagnostics.items()[0].code, "GP2001");
  EXPECT_EQ(bad.diagnostics.items()[0].help, "did you mean `modinfo.class_name`?");

  auto policy = loader.Load(Src("guardpolicy 1\n"
                                "unsafe policy p {\n"
                                "  keep when guard_type == SHAPE_ENV\n"
                                "  drop when names.depth(name) > 3 and modinfo.class_name == \"Dropout\"\n"
                                "  use names.drop_deep(max_depth = 5)\n"
                                "}\n"),
                            "p", {});
  const Program& prog = policy->program();
  ASSERT_EQ(prog.image().fields, (std::vector<std::string>{"guard_type", "name", "modinfo.class_name", "names.drop_deep"}));
  // Entries as core values; modinfo.class_name is given (no Python entry here).
  std::vector<FieldValues> entries(4);
  entries[0]["name"] = Value{0, 0, "a.b.c.d"};
  entries[0]["modinfo.class_name"] = Value{0, 0, "Dropout"};  // depth 3: not > 3
  entries[1]["name"] = Value{0, 0, "a.b.c.d.e"};
  entries[1]["modinfo.class_name"] = Value{0, 0, "Dropout"};  // depth 4 Dropout: drop
  entries[2]["name"] = Value{0, 0, "a.b.c.d.e.f.g"};
  entries[2]["modinfo.class_name"] = Value{0, 0, "Linear"};   // depth 6 > 5: drop_deep drops
  entries[3]["name"] = Value{0, 0, "a.b.c.d.e.f.g"};
  entries[3]["guard_type"] = Value{schema->enums()[schema->FindEnum("GuardType")].Find("SHAPE_ENV"), 0, "SHAPE_ENV"};
  entries[3]["modinfo.class_name"] = Value{0, 0, ""};
  for (size_t i = 0; i < 3; ++i) entries[i]["guard_type"] = Value{-1, 0, "X"};
  HostStrings strings;
  std::vector<std::pair<Decision, int>> got;
  for (const Outcome& o : EvaluateEntries(prog, *schema, entries, strings)) got.emplace_back(o.decision, o.rule);
  EXPECT_EQ(got, (std::vector<std::pair<Decision, int>>{
                     {Decision::kKeep, -1}, {Decision::kDrop, 1}, {Decision::kDrop, 2}, {Decision::kKeep, 0}}));
  EXPECT_EQ(prog.image().rules[2].policy, "names.drop_deep");
  // A plugin field that needs the Python entry fails clearly without one.
  entries[1].erase("modinfo.class_name");  // read: name depth 4 > 3
  try {
    (void)EvaluateEntries(prog, *schema, entries, strings);
    FAIL();
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("libgp_modinfo.so: plugin `modinfo`: field `modinfo.class_name`: needs the "
                                         "Python GuardFilterEntry"),
              std::string::npos)
        << e.what();
  }
}

TEST(PluginCalls, FailingCallbacksThrowPluginErrorWithTheirMessage) {
  for (const char* kind : {"extract", "call", "filter"}) {
    auto schema = std::make_shared<const Schema>(TestSchema()->WithPlugin(LoadPlugin(kBad + "/" + kind + ".so")));
    Loader loader(schema, testing::kDataDir + "/std");
    auto policy = loader.Load(Src("guardpolicy 1\nunsafe policy p {\n  drop when good.flag\n  drop when good.one(1) == 1\n"
                                  "  use good.drop_all\n}\n"),
                              "p", {});
    const Program& prog = policy->program();
    std::vector<FieldValues> entries(1);
    // good.flag is true: given false, the call is reached.
    if (std::string(kind) == "call") entries[0]["good.flag"] = Value{0, 0, {}};
    HostStrings strings;
    try {
      (void)EvaluateEntries(prog, *schema, entries, strings);
      FAIL() << kind;
    } catch (const PluginError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string(kind) + ".so: plugin `good`: "), std::string::npos) << what;
      EXPECT_NE(what.find(": the bad plugin failed on purpose"), std::string::npos) << what;
    }
  }
}

TEST(PluginArtifacts, CompiledPoliciesNeedTheirPluginsLoaded) {
  auto schema = std::make_shared<const Schema>(WithExamples());
  Loader loader(schema, testing::kDataDir + "/std");
  auto policy = loader.Load(Src("guardpolicy 1\nunsafe policy p {\n  drop when names.depth(name) > 2\n"
                                "  use names.drop_deep(max_depth = 1)\n}\n"),
                            "p", {});
  const std::string bytes = SerializePolicy(*policy, *schema);
  auto again = DeserializePolicy(bytes, *schema, "p.gpolc");
  EXPECT_EQ(Disassemble(again->program().image(), *schema), Disassemble(policy->program().image(), *schema));
  try {
    (void)DeserializePolicy(bytes, *TestSchema(), "p.gpolc");
    FAIL();
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find("`names.drop_deep` is neither a schema field nor a filter of a loaded plugin"),
              std::string::npos)
        << e.what();
  }
}

// A table linked into the test: `wide.sum`, a function of 16 int arguments.
gp_rc Sum(void*, const gp_value* args, uint32_t n, gp_value* out) {
  out->i = 0;
  for (uint32_t k = 0; k < n; ++k) out->i += args[k].i;
  return GP_OK;
}
const char* NoError(void*) { return ""; }
const char* const kSixteenInts[] = {"int", "int", "int", "int", "int", "int", "int", "int",
                                    "int", "int", "int", "int", "int", "int", "int", "int"};
const gp_function_decl kSum[] = {{"sum", "int", kSixteenInts, 16, "the sum of its arguments", &Sum}};
const gp_plugin_api kWideApi = {sizeof(gp_plugin_api), GP_PLUGIN_API_VERSION_MAJOR, GP_PLUGIN_API_VERSION_MINOR,
                                "wide", "1.0", "one wide function", nullptr, nullptr, &NoError, nullptr, 0, kSum, 1,
                                nullptr, 0};

// Calls of `wide.sum` nested three deep need 46 stack values, over the VM's 32: the
// verifier's typed kStackTooDeep reaches the author as GP0003 on the policy, not as an
// internal error.
TEST(PluginCalls, NestedCallsOverTheStackLimitAreGP0003) {
  auto schema = std::make_shared<const Schema>(TestSchema()->WithPlugin(Plugin::FromTable(&kWideApi, "in-process")));
  Loader loader(schema, testing::kDataDir + "/std");
  const std::string ones = "1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1";
  const std::string text = "guardpolicy 1\nunsafe policy deep {\n  drop when wide.sum(" + ones + ", wide.sum(" + ones +
                           ", wide.sum(" + ones + ", 1))) > 0\n}\n";
  const std::string shallow = "guardpolicy 1\nunsafe policy shallow {\n  drop when wide.sum(" + ones + ", 1) > 15\n}\n";
  try {
    (void)loader.Load(Src(text), "", {});
    FAIL() << "loaded";
  } catch (const PolicyError& e) {
    // The one error; the analysis also warns (GP3008: the rule can drop input tensors).
    ASSERT_EQ(testing::ErrorCodes(e.diagnostics()), std::vector<std::string>{codes::kNestingTooDeep}) << e.what();
    const auto d = std::find_if(e.diagnostics().items().begin(), e.diagnostics().items().end(),
                                [](const Diagnostic& x) { return x.severity == Severity::kError; });
    EXPECT_EQ(d->message, "policy `deep` needs a value stack deeper than 32 (nested calls with many arguments)");
  }
  const auto ok = loader.Load(Src(shallow), "", {});
  const Value entry[] = {{}};
  EXPECT_EQ(Evaluate(ok->program(), entry).decision, Decision::kDrop);  // 16 > 15
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

TEST(Registry, ListsEveryKindAndReturnsFiltersByName) {
  Registry registry(testing::PluginSchema(), testing::kDataDir + "/std");
  auto policy = testing::MakeLoader().Load(testing::Src("guardpolicy 1\npolicy mine { doc \"d\" }\n"), "", {});
  registry.AddPolicy(policy);
  std::map<std::string, std::string> kinds;
  for (const FilterInfo& f : registry.List()) kinds[f.name] = FilterKindName(f.kind);
  // torch's six as builtins and as std policies, guardpolicy's watch_state, a plugin, a policy
  EXPECT_EQ(kinds.size(), 6u + 6u + 1u + 1u + 1u);
  EXPECT_EQ(kinds["builtin.keep_tensor_guards"], "builtin");
  EXPECT_EQ(kinds["keep_tensor_guards"], "std");
  EXPECT_EQ(kinds["watch_state"], "std");
  EXPECT_EQ(kinds["names.drop_deep"], "plugin");
  EXPECT_EQ(kinds["mine"], "policy");
  EXPECT_EQ(registry.Get("mine", {}), policy);

  // A native filter with a parameter, as a policy whose only rule is the filter.
  Literal yes;
  yes.kind = Literal::Kind::kBool;
  yes.b = true;
  auto native = registry.Get("builtin.keep_tensor_guards", {{"keep_parameters", yes}});
  EXPECT_EQ(native->name(), "builtin_keep_tensor_guards");
  EXPECT_EQ(native->doc().rfind("torch.compiler.keep_tensor_guards_unsafe", 0), 0u) << native->doc();
  ASSERT_EQ(native->meta().params.size(), 1u);
  EXPECT_TRUE(native->meta().params.at("keep_parameters").b);
  ASSERT_EQ(native->program().image().rules.size(), 1u);
  EXPECT_EQ(native->program().image().rules[0].policy, "builtin.keep_tensor_guards");

  try {
    (void)registry.Get("builtin.skip_guard_on_global", {});
    FAIL();
  } catch (const PolicyError& e) {
    ASSERT_EQ(e.diagnostics().items().size(), 1u);
    EXPECT_EQ(e.diagnostics().items()[0].code, "GP4001");
    EXPECT_EQ(e.diagnostics().items()[0].help, "did you mean `builtin.skip_guard_on_globals`?");
  }
  // Parameters are checked against the filter's declaration, not the generated `use`.
  Literal two;
  two.kind = Literal::Kind::kInt;
  two.i = 2;
  for (const auto& [params, message, help] :
       std::vector<std::tuple<ParamValues, std::string, std::string>>{
           {{{"max_dept", two}}, "filter `names.drop_deep` has no parameter `max_dept`", "did you mean `max_depth`?"},
           {{{"max_depth", yes}}, "parameter `max_depth` of filter `names.drop_deep` needs an int value", ""}}) {
    try {
      (void)registry.Get("names.drop_deep", params);
      FAIL() << message;
    } catch (const PolicyError& e) {
      ASSERT_EQ(e.diagnostics().items().size(), 1u);
      EXPECT_EQ(e.diagnostics().items()[0].code, "GP4002");
      EXPECT_EQ(e.diagnostics().items()[0].message, message);
      EXPECT_EQ(e.diagnostics().items()[0].help, help);
    }
  }
  // A policy leaves the registry with its last owner.
  policy.reset();
  for (const FilterInfo& f : registry.List()) EXPECT_NE(f.name, "mine");
}

}  // namespace
}  // namespace guardpolicy
