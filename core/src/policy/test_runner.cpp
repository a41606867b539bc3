// test_runner.cpp: evaluating `expect` lines against compiled policies.
#include "guardpolicy/test_runner.h"

#include <optional>

#include "entry_fields.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/extension_host.h"
#include "guardpolicy/vm.h"

namespace guardpolicy {
namespace {

// The literals an expectation gives (a field given twice: the last one).
EntryLiterals LiteralsOf(const Expectation& ex) {
  EntryLiterals literals;
  for (const FieldInit& f : ex.fields) literals[f.path] = f.value;
  return literals;
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
        const EntryLiterals literals = LiteralsOf(ex);
        o = EvaluateEntries(program, loader.schema(), {FieldsOf(literals, loader.schema())}, strings).front();
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
