// front_end.h: the front end as one table of stages, run by the Loader (docs/design.md,
// "Stages"; the optimizer runs its passes the same way, optimizer.cpp).
//
//   parse     SourceFile                         -> Module
//   link      Module                             -> each policy's open LinkedPolicy
//   check     Module                             -> diagnostics, the analysable policies
//   analyse   LinkedPolicy (checked), evaluator  -> AnalysisResult per policy, warnings
//   select    Module, policy name                -> the PolicyDecl to load
//   compile   LinkedPolicy, parameters           -> ProgramImage
//   verify    ProgramImage                       -> ok, or a typed VerifyError
//   optimize  ProgramImage, AnalysisResult       -> ProgramImage
//   bind      ProgramImage, Schema               -> Program (Program::Link)
//
// Each stage is a function of the values before it that writes a value of its own; the
// checker also fills the tree's types and resolutions, which later stages read. Lint runs
// the stages up to `analyse`, Load the rest after it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "guardpolicy/analysis.h"
#include "guardpolicy/bytecode.h"
#include "guardpolicy/checker.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/evaluator.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/options.h"
#include "guardpolicy/resolver.h"
#include "guardpolicy/schema.h"

namespace guardpolicy::front_end {

// What the stages hand on, for one source file.
struct Values {
  // Inputs.
  SourceFilePtr file;
  std::string plugin;   // Module::plugin: the namespace a filter module stands for
  bool analyse = true;  // false: only errors matter (a library module): no link, no analysis
  std::string policy;   // Load: the policy to load ("": the only one)
  ParamValues params;   // Load: its parameter values

  // The stages' values, in order.
  Diagnostics diagnostics;                               // every stage adds to them
  std::unique_ptr<Module> module;                        // parse
  std::map<const PolicyDecl*, LinkedPolicy> linked;      // link
  std::vector<CheckResult::Analysable> analysable;       // check (`at`: into `diagnostics`)
  std::map<const PolicyDecl*, AnalysisResult> analysis;  // analyse
  const PolicyDecl* selected = nullptr;                  // select
  ProgramImage image;                                    // compile, optimize
  std::optional<Program> program;                        // bind
};

// What the stages ask.
struct Context {
  PolicyResolver& resolver;
  const Schema& schema;
  const CompileOptions& options;
  RuleEvaluator& evaluator;
};

// The stages up to `analyse`; never throws on author mistakes.
void Lint(Values& values, const Context& context);

// The stages after `analyse`, on values Lint left without errors. False when a stage
// stopped; the diagnostics say why.
bool Load(Values& values, const Context& context);

}  // namespace guardpolicy::front_end
