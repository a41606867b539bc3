// evaluator.h: what a policy's linked rules decide on an entry, asked before the policy is
// loaded.
//
// The analysis asks this of entries it can describe in full (the ambient `SHAPE_ENV` and
// `GLOBAL_STATE` guards) and through this interface alone: it neither compiles nor runs
// anything itself. The facade implements it by compiling the linked rules and running them
// in the VM, so the language has one semantics, the VM's.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "guardpolicy/linker.h"
#include "guardpolicy/literal.h"

namespace guardpolicy {

// One entry as core field values by name: bools, ints, strings, and enum members by name
// (a string). Absent fields read as false, 0, "", no member, the empty set; the
// `guard_source.is_*` predicates follow from `guard_source` unless given.
using EntryLiterals = std::map<std::string, Literal, std::less<>>;

struct Decided {
  Decision decision = Decision::kKeep;
  int rule = -1;  // index into LinkedPolicy::rules, or -1 for the policy's default
};

class RuleEvaluator {
 public:
  virtual ~RuleEvaluator() = default;
  // What `linked` (its policy's own parameters at their defaults) decides on each of
  // `entries`, each one alone. Empty when the rules make no program (loading the policy
  // says why); nullopt for an entry a plugin failed on.
  virtual std::vector<std::optional<Decided>> Decide(const LinkedPolicy& linked,
                                                     const std::vector<EntryLiterals>& entries) = 0;
};

}  // namespace guardpolicy
