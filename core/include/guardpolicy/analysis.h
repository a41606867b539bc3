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
#include "guardpolicy/checker.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// `policy` must have passed the type checks without errors. Returns the rules (indices after
// `use` expansion) that no entry at all can reach: unreachable by logic alone, without the
// facts about real torch entries that the warnings also use.
// Policies over CompileOptions::max_analyzed_rules rules are not analyzed; a question
// that runs out of CompileOptions::analysis_budget yields no finding.
std::vector<int> AnalyzePolicy(const PolicyDecl& policy, const Schema& schema, PolicyResolver& resolver,
                               const CompileOptions& options, Diagnostics& diags);

}  // namespace guardpolicy
