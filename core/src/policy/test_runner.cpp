// test_runner.cpp: evaluating `expect` lines against compiled policies.
#include "guardpolicy/test_runner.h"

#include <optional>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/extension_host.h"
#include "guardpolicy/vm.h"

namespace guardpolicy {
namespace {

// torch._guards.GuardSource predicates (torch 2.8+) from the member name, for tests that
// give `guard_source` only. `is_specialized_nn_module` ignores the FSDP config switch.
std::optional<bool> GuardSourcePredicate(std::string_view field, std::string_view source) {
  const bool unspecialized = source.find("UNSPECIALIZED") != std::string_view::npos;
  if (field == "guard_source.is_local") return source.starts_with("LOCAL");
  if (field == "guard_source.is_unspecialized_nn_module") return unspecialized;
  if (field == "guard_source.is_unspecialized_builtin_nn_module") {
    return source.find("UNSPECIALIZED_BUILTIN") != std::string_view::npos;
  }
  if (field == "guard_source.is_specialized_nn_module") {
    return !unspecialized && source.ends_with("_SPECIALIZED_NN_MODULE");
  }
  if (field == "guard_source.is_fsdp_module") return source.find("FSDP") != std::string_view::npos;
  return std::nullopt;
}

// The core and plugin field values an expectation gives (GuardSource predicates follow
// from `guard_source` unless given); absent fields read as their zero value.
FieldValues EntryFields(const Expectation& ex, const Schema& schema) {
  FieldValues values;
  for (const FieldInit& f : ex.fields) {
    const int index = schema.FindField(f.path);
    if (index < 0) continue;  // reported by the checker (GP2015)
    const Type t = schema.fields()[index].type;
    Value v;
    switch (f.value.kind) {
      case Literal::Kind::kBool: v.i = f.value.b; break;
      case Literal::Kind::kInt: v.i = f.value.i; break;
      case Literal::Kind::kString:
        v.s = f.value.str;
        if (t.kind == TypeKind::kEnum) v.i = schema.enums()[t.enum_index].Find(f.value.str);
        break;
    }
    values[f.path] = v;
  }
  if (auto source = values.find("guard_source"); source != values.end()) {
    const std::string_view name = source->second.s;
    for (const FieldInfo& field : schema.fields()) {
      if (auto flag = GuardSourcePredicate(field.name, name); flag && !values.count(field.name)) {
        values[field.name] = Value{*flag ? 1 : 0, 0, {}};
      }
    }
  }
  return values;
}

}  // namespace

std::vector<ExpectationResult> RunTests(Loader& loader, SourceFilePtr file) {
  LintResult lint = loader.Lint(file);
  if (!lint.module || lint.diagnostics.HasErrors()) throw PolicyError(std::move(lint.diagnostics));
  std::vector<ExpectationResult> results;
  for (const TestDecl& test : lint.module->tests) {
    auto compiled = loader.Load(file, test.target, {});
    const Program& program = compiled->program();
    for (const Expectation& ex : test.expectations) {
      // Each expectation is its own guard_filter_fn call of one entry.
      // Plugin fields the expectation does not give are extracted only if the program reads
      // them; a plugin that fails fails this expectation, not the run.
      HostStrings strings;
      Outcome o;
      try {
        o = EvaluateEntries(program, loader.schema(), {EntryFields(ex, loader.schema())}, strings).front();
      } catch (const PluginError& e) {
        results.push_back({test.target, ex.range, ex.decision, ex.decision, -1, "", e.what()});
        continue;
      }
      const std::string source =
          o.rule >= 0 ? program.image().rules[o.rule].file + ":" + std::to_string(program.image().rules[o.rule].line)
                      : program.image().default_file + ":" + std::to_string(program.image().default_line);
      results.push_back({test.target, ex.range, ex.decision, o.decision, o.rule, source, {}});
    }
  }
  return results;
}

}  // namespace guardpolicy
