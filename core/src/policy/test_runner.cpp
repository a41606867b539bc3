// test_runner.cpp: evaluating `expect` lines against compiled policies.
#include "guardpolicy/test_runner.h"

#include <optional>

#include "guardpolicy/diag_codes.h"
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

// The entry view of one expectation, in `program`'s slot order.
std::vector<Value> EntryView(const Expectation& ex, const Program& program, const Schema& schema) {
  std::vector<Value> view(program.fields.size() + 1);
  for (size_t slot = 0; slot < program.fields.size(); ++slot) {
    if (program.field_types[slot].kind == TypeKind::kEnum) view[slot].i = -1;  // no member
  }
  for (const FieldInit& f : ex.fields) {
    if (f.path != "guard_source") continue;
    for (size_t slot = 0; slot < program.fields.size(); ++slot) {
      if (auto flag = GuardSourcePredicate(program.fields[slot], f.value.str)) view[slot].i = *flag;
    }
  }
  for (const FieldInit& f : ex.fields) {
    for (size_t slot = 0; slot < program.fields.size(); ++slot) {
      if (program.fields[slot] != f.path) continue;
      const Type t = program.field_types[slot];
      Value& v = view[slot];
      switch (f.value.kind) {
        case Literal::Kind::kBool: v.i = f.value.b; break;
        case Literal::Kind::kInt: v.i = f.value.i; break;
        case Literal::Kind::kString:
          v.s = f.value.str;
          if (t.kind == TypeKind::kEnum) v.i = schema.enums()[t.enum_index].Find(f.value.str);
          break;
      }
    }
  }
  return view;
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
      const std::vector<Value> view = EntryView(ex, program, loader.schema());
      const Outcome o = Evaluate(program, view.data());
      const std::string source =
          o.rule >= 0 ? program.rules[o.rule].file + ":" + std::to_string(program.rules[o.rule].line)
                      : program.default_file + ":" + std::to_string(program.default_line);
      results.push_back({test.target, ex.range, ex.decision, o.decision, o.rule, source});
    }
  }
  return results;
}

}  // namespace guardpolicy
