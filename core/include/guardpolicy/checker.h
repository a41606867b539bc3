// checker.h: names and types of a parsed Module, checked against the Schema.
//
// Resolves every path to a field, a parameter or an enum literal; checks operand and
// literal types, conditions, parameters, `use` targets (and cycles), config knobs,
// stances, regexes and guard_type names; and proves that a policy which can drop a guard
// is marked `unsafe`. Annotates Expr::type / Expr::resolved in place. Every problem is a
// diagnostic; the checker never throws on author mistakes.
#pragma once

#include <map>
#include <string_view>

#include "guardpolicy/analysis.h"
#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"
#include "guardpolicy/resolver.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

struct CheckResult {
  Diagnostics diagnostics;
  // What the analysis proved, per policy of the module it analyzed (a value for the
  // optimizer; nothing is written into the tree).
  std::map<const PolicyDecl*, AnalysisResult> analysis;
};

CheckResult Check(Module& module, const Schema& schema, PolicyResolver& resolver,
                  const CompileOptions& options = {});

// True when some input can make `policy` (with `use` expanded) decide drop.
bool CanDrop(const PolicyDecl& policy, PolicyResolver& resolver);

}  // namespace guardpolicy
