// policy.h: the facade. Source text -> parsed, checked, compiled, verified policy.
//
//   Loader loader(Schema::FromFile(".../guard_entry.yaml"), ".../policies/std");
//   auto policy = loader.Load(SourceFileFromPath("serving.gpol"), "serving", {});
//   Outcome o = Evaluate(policy->program(), entry_view);
//
// A Loader resolves `use` targets in the same file first, then in its library directory
// (`<std_dir>/<name>.gpol`); `<plugin>.<filter>` names a filter of a plugin in the schema
// (Schema::WithPlugin; `builtin.*` are torch's filters). Loaders are not thread-safe; CompiledPolicy objects are
// immutable and thread-safe. Author mistakes throw PolicyError with every diagnostic.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "guardpolicy/analysis.h"
#include "guardpolicy/ast.h"
#include "guardpolicy/bytecode.h"
#include "guardpolicy/compiled_policy.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/options.h"
#include "guardpolicy/resolver.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// Reads `path` into a SourceFile. Missing, unreadable or non-regular files (a directory)
// throw PolicyError with one GP0001 diagnostic naming the path and the OS reason.
SourceFilePtr SourceFileFromPath(const std::string& path, const CompileOptions& options = {});

struct LintResult {
  std::unique_ptr<Module> module;  // null when the file could not be parsed at all
  Diagnostics diagnostics;
  // What the analysis proved, per analyzed policy of `module` (Load hands it to the optimizer).
  std::map<const PolicyDecl*, AnalysisResult> analysis;
};

class RuleEvaluator;
namespace front_end {
struct Values;
struct Context;
}  // namespace front_end

class Loader final : public PolicyResolver {
 public:
  Loader(std::shared_ptr<const Schema> schema, std::string std_dir, CompileOptions options = {});
  ~Loader() override;

  // Parses and checks every policy in `file`; never throws on author mistakes.
  LintResult Lint(SourceFilePtr file);

  // Compiles policy `name` of `file` (or the only policy when `name` is empty) with
  // `params` bound. Throws PolicyError (all diagnostics) when anything is wrong.
  std::shared_ptr<const CompiledPolicy> Load(SourceFilePtr file, const std::string& name,
                                             const ParamValues& params);

  // Loads `path`: a `.gpolc` artifact (any file starting with its magic; `params` must be
  // empty and `name`, if given, must match) or policy source. Throws PolicyError.
  std::shared_ptr<const CompiledPolicy> LoadFile(const std::string& path, const std::string& name,
                                                 const ParamValues& params);

  const Schema& schema() const { return *schema_; }

  // PolicyResolver.
  const PolicyDecl* Resolve(std::string_view name, const Module& from) override;
  std::vector<std::string> KnownPolicies(const Module& from) override;

 private:
  // The front end's stages (core/src/policy/front_end.h) up to the analysis, on `values`.
  void RunLint(front_end::Values& values);
  front_end::Context Context(RuleEvaluator& evaluator);
  // A library module (policy source, or the module that stands for plugin `plugin`'s
  // filters): its errors go to library_diagnostics_; null when it has any.
  std::unique_ptr<Module> LintLibrary(SourceFilePtr file, std::string_view plugin);
  const Module* LoadLibraryModule(const std::string& name);
  const Module* LoadPluginModule(std::string_view ns);

  std::shared_ptr<const Schema> schema_;
  std::string std_dir_;
  CompileOptions options_;
  std::map<std::string, std::unique_ptr<Module>, std::less<>> library_;
  std::map<std::string, std::unique_ptr<Module>, std::less<>> plugin_modules_;  // by namespace
  std::set<std::string, std::less<>> in_progress_;
  Diagnostics library_diagnostics_;
};

}  // namespace guardpolicy
