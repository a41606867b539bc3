// front_end.cpp: the stage table and the stages, each a call of its folder's function.
#include "front_end.h"

#include <fmt/format.h>

#include "guardpolicy/compiler.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/optimizer.h"
#include "guardpolicy/parser.h"
#include "guardpolicy/verifier.h"

namespace guardpolicy::front_end {
namespace {

// Each returns false to stop the stages after it.
using StageFn = bool (*)(Values&, const Context&);
struct Stage {
  const char* name;
  StageFn run;
};

bool ParseStage(Values& v, const Context& c) {
  ParseResult parsed = Parse(v.file, c.options);
  v.diagnostics = std::move(parsed.diagnostics);
  v.module = std::move(parsed.module);
  if (v.module) v.module->plugin = v.plugin;
  // Checking a tree with syntax errors would only add noise about the same mistakes.
  return v.module && !v.diagnostics.HasErrors();
}

bool LinkStage(Values& v, const Context& c) {
  if (!v.analyse) return true;
  for (const PolicyDecl& p : v.module->policies) v.linked.emplace(&p, LinkOpen(p, c.resolver, c.options));
  return true;
}

bool CheckStage(Values& v, const Context& c) {
  CheckResult checked = Check(*v.module, c.schema, c.resolver, c.options);
  for (CheckResult::Analysable& a : checked.analysable) a.at += v.diagnostics.size();
  v.analysable = std::move(checked.analysable);
  v.diagnostics.Append(checked.diagnostics);
  return true;
}

bool AnalyseStage(Values& v, const Context& c) {
  if (!v.analyse) return true;
  // From the last policy back, so that the places of the earlier ones stay where they are.
  for (auto a = v.analysable.rbegin(); a != v.analysable.rend(); ++a) {
    Diagnostics found;
    v.analysis[a->policy] = AnalyzePolicy(v.linked.at(a->policy), c.schema, c.evaluator, c.options, found);
    v.diagnostics.InsertAt(a->at, found);
  }
  return true;
}

bool SelectStage(Values& v, const Context& c) {
  const Module& module = *v.module;
  const SourceRange whole{module.file, 0, 0};
  if (!v.policy.empty()) {
    v.selected = module.FindPolicy(v.policy);
    if (v.selected != nullptr) return true;
    std::vector<std::string> names;
    for (const PolicyDecl& p : module.policies) names.push_back(p.name);
    const std::string best = ClosestMatch(v.policy, names);
    v.diagnostics.Error(codes::kPolicySelection, whole, fmt::format("no policy named `{}`", v.policy),
                        best.empty() ? "" : fmt::format("did you mean `{}`?", best));
    return false;
  }
  if (module.policies.size() == 1) {
    v.selected = &module.policies.front();
    return true;
  }
  if (module.policies.empty()) {
    v.diagnostics.Error(codes::kPolicySelection, whole, "the file declares no policy");
  } else {
    std::string names;
    for (const PolicyDecl& p : module.policies) names += (names.empty() ? "`" : ", `") + p.name + "`";
    v.diagnostics.Error(codes::kPolicySelection, whole, "the file declares several policies",
                        fmt::format("choose one with {}: {}", c.options.policy_option, names));
  }
  return false;
}

bool CompileStage(Values& v, const Context& c) {
  v.image = Compile(v.linked.at(v.selected), c.schema, v.params, v.diagnostics, c.options);
  return !v.diagnostics.HasErrors();
}

// A defect of the compiler, not of the policy: reported, never run.
bool InternalError(Values& v, const std::string& what) {
  v.diagnostics.Error(codes::kInternal, v.selected->name_range, "internal error: " + what);
  return false;
}

// The verifier's verdict, after compiling or after an optimizer pass.
bool Verdict(Values& v, const std::optional<VerifyError>& error) {
  if (!error) return true;
  if (error->kind == VerifyError::Kind::kStackTooDeep) {
    v.diagnostics.Error(codes::kNestingTooDeep, v.selected->name_range,
                        fmt::format("policy `{}` needs a value stack deeper than {} (nested calls with many arguments)",
                                    v.selected->name, kMaxStack),
                        "split the condition, or pass fewer arguments");
    return false;
  }
  return InternalError(v, "bytecode failed verification: " + error->message);
}

bool VerifyStage(Values& v, const Context&) { return Verdict(v, Verify(v.image).error); }

bool OptimizeStage(Values& v, const Context& c) {
  OptimizeOptions opt;
  opt.level = c.options.opt_level;
  if (auto it = v.analysis.find(v.selected); it != v.analysis.end()) {
    opt.unreachable = it->second.unreachable;
    opt.rule_type_masks = it->second.rule_type_masks;
  }
  return Verdict(v, Optimize(v.image, c.schema, opt));
}

bool BindStage(Values& v, const Context& c) {
  try {
    v.program = Program::Link(std::move(v.image), c.schema);
  } catch (const LinkError& e) {
    // The checker resolved every name against this schema and checked every pattern.
    return InternalError(v, std::string("the compiled program does not link: ") + e.what());
  }
  return true;
}

// The front end, in order (docs/design.md); Lint runs the first kLintStages.
constexpr Stage kStages[] = {
    {"parse", ParseStage},     {"link", LinkStage},     {"check", CheckStage},
    {"analyse", AnalyseStage}, {"select", SelectStage}, {"compile", CompileStage},
    {"verify", VerifyStage},   {"optimize", OptimizeStage}, {"bind", BindStage},
};
constexpr size_t kLintStages = 4;

bool Run(Values& v, const Context& c, size_t first, size_t last) {
  for (size_t i = first; i < last; ++i) {
    if (!kStages[i].run(v, c)) return false;
  }
  return true;
}

}  // namespace

void Lint(Values& values, const Context& context) { Run(values, context, 0, kLintStages); }

bool Load(Values& values, const Context& context) {
  return Run(values, context, kLintStages, std::size(kStages));
}

}  // namespace guardpolicy::front_end
