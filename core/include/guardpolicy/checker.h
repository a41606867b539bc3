// checker.h: names and types of a parsed Module, checked against the Schema.
//
// Resolves every path to a field, a parameter or an enum literal; checks operand and
// literal types, conditions, parameters, `use` and `extends` targets (and cycles), config knobs
// (and the risks of their values),
// stances, regexes and guard_type names; and proves that a policy which can drop a guard
// is marked `unsafe`. Annotates Expr::type / Expr::resolved in place. Every problem is a
// diagnostic; the checker never throws on author mistakes.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"
#include "guardpolicy/resolver.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

struct CheckResult {
  Diagnostics diagnostics;
  // The policies the analysis may read: well-typed, and so are the same-file policies they
  // use. `at`: where in `diagnostics` the analysis' findings about it belong (after the
  // policy's other diagnostics, before those about `unsafe`).
  struct Analysable {
    const PolicyDecl* policy = nullptr;
    size_t at = 0;
  };
  std::vector<Analysable> analysable;  // in declaration order
};

CheckResult Check(Module& module, const Schema& schema, PolicyResolver& resolver,
                  const CompileOptions& options = {});

// True when some input can make `policy` (with `use` and `extends` expanded, its default
// inherited) decide drop.
bool CanDrop(const PolicyDecl& policy, PolicyResolver& resolver);

}  // namespace guardpolicy
