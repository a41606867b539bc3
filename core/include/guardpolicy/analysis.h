// analysis.h: what a well-typed policy means, beyond its types.
//
// Reports rules that can never fire (always false, or covered by earlier rules, naming
// the covering rule), conditions that are always true, duplicate rules, drops that do
// nothing alone (GRAD_MODE, DETERMINISTIC_ALGORITHMS: GLOBAL_STATE covers them), risky
// drops (SHAPE_ENV, GLOBAL_STATE, TENSOR_MATCH on inputs, every guard) with what can go
// stale, and unused parameters. Exact over bools and enums, conservative for strings,
// ints and regexes (see analysis/formula.h): a finding is never a false alarm about
// reachability. All findings are warnings.
#pragma once

#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/evaluator.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/options.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// What the optimizer may use, proven by logic alone (no facts about real torch entries, so
// the optimized program decides like the unoptimized one on every possible input).
struct AnalysisResult {
  std::vector<int> unreachable;           // rule indices (after `use` expansion) no entry reaches
  std::vector<uint64_t> rule_type_masks;  // per rule: bit v = guard_type member v can match,
                                          // bit 63 = another name can; empty when not computed
};

// The analyse stage. `linked` is the policy's open link (LinkOpen); the policy and the ones
// it uses must have passed the type checks without errors (CheckResult::analysable).
// Policies over CompileOptions::max_analyzed_rules rules are not analyzed; a question that
// runs out of CompileOptions::analysis_budget yields no finding (and "can match" for the
// optimizer). What the policy decides on a given entry is asked of `evaluator` only.
AnalysisResult AnalyzePolicy(const LinkedPolicy& linked, const Schema& schema, RuleEvaluator& evaluator,
                             const CompileOptions& options, Diagnostics& diags);

}  // namespace guardpolicy
