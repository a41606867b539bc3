// resolver.h: how the front end finds the policy a `use` names (the Loader is one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "guardpolicy/ast.h"

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

}  // namespace guardpolicy
