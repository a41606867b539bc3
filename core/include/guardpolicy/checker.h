// checker.h: names and types of a parsed Module, checked against the Schema.
//
// Resolves every path to a field, a parameter or an enum literal; checks operand and
// literal types, conditions, parameters, `use` targets (and cycles), config knobs,
// stances, regexes and guard_type names; and proves that a policy which can drop a guard
// is marked `unsafe`. Annotates Expr::type / Expr::resolved in place. Every problem is a
// diagnostic; the checker never throws on author mistakes.
#pragma once

#include <string_view>

#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// Finds the policy a `use` names. `from` is the module containing the `use`; same-module
// policies come first, then the library (policies/std). Returns null when unknown. The
// returned declaration must already be checked (its annotations filled).
class PolicyResolver {
 public:
  virtual ~PolicyResolver() = default;
  virtual const PolicyDecl* Resolve(std::string_view name, const Module& from) = 0;
  // Names offered for "did you mean" when a `use` target is unknown.
  virtual std::vector<std::string> KnownPolicies(const Module& from) = 0;
};

Diagnostics Check(Module& module, const Schema& schema, PolicyResolver& resolver,
                  const CompileOptions& options = {});

// True when some input can make `policy` (with `use` expanded) decide drop.
bool CanDrop(const PolicyDecl& policy, PolicyResolver& resolver);

}  // namespace guardpolicy
