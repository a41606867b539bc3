// linker.h: the resolve/link stage of the front end: `use` and `extends` expanded once.
//
// A policy's rules after `use` expansion, first match deciding: the rules of each used
// policy stand in place of its `use`, with the used policy's parameters bound to the `use`'s
// arguments over their defaults; the rules of the policy it `extends` come after its own (the
// `extends` clause is a `use` at the end of the body). Its `default` and runtime lines are its
// own over its base's (Inherit). `use` arguments are literals, so the rules a `use` brings in
// depend on that `use` alone: Summarize counts a policy's expansion once however often it is
// used (fan-out costs one visit per policy), and LinkPolicy lists the rules, bounded.
// The checker, the analysis and the code generator all read the expansion from here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "guardpolicy/ast.h"
#include "guardpolicy/options.h"
#include "guardpolicy/resolver.h"

namespace guardpolicy {

// One rule after `use` expansion, with its origin.
struct LinkedRule {
  const Rule* rule = nullptr;
  const PolicyDecl* owner = nullptr;  // the policy that wrote it
  ParamValues bound;                  // the owner's parameter values
  const Use* via = nullptr;  // the linked policy's own `use` (or `extends`) that brought it in
                             // (null: its own rule)
  const Use* filter_use = nullptr;    // the outermost `use` of a plugin filter on its way in, if any

  // Where to report the rule: itself, or the linked policy's `use` that brought it in.
  const SourceRange& site() const { return via ? via->range : rule->range; }
};

// A `use` the expansion left out, with what it would have brought in.
struct LinkProblem {
  enum class Kind : uint8_t {
    kTooDeep,       // nested deeper than CompileOptions::max_use_depth
    kMissingValue,  // a parameter of the used policy has no default and no argument
  };
  Kind kind = Kind::kTooDeep;
  const Use* use = nullptr;
  const PolicyDecl* target = nullptr;
  std::string param;  // kMissingValue
};

// A policy's `default` and runtime lines: its own, then for each kind of line it lacks, its
// base's (`extends`), then the base's base's, ...; `config` knob by knob (its own knobs first).
// An unknown base, or one met again on a cycle, ends the chain (the checker reports both).
struct Inherited {
  std::optional<Decision> default_decision;   // unset: no policy of the chain has a `default`
  const PolicyDecl* default_owner = nullptr;  // the policy whose `default` line it is
  RuntimeSettings runtime;                    // ranges point into the file of the line's policy
  std::vector<const PolicyDecl*> chain;       // the policy, its base, its base's base, ...

  Decision EffectiveDefault() const { return default_decision.value_or(Decision::kKeep); }
};
Inherited Inherit(const PolicyDecl& policy, PolicyResolver& resolver);

// The policy `extends` of `policy` names (null: none, unknown, or `policy` itself).
const PolicyDecl* BaseOf(const PolicyDecl& policy, PolicyResolver& resolver);

struct LinkedPolicy {
  const PolicyDecl* policy = nullptr;
  Inherited settings;  // the policy's `default` and runtime lines, with its base's
  std::vector<LinkedRule> rules;
  std::vector<LinkProblem> problems;
  // The expansion stopped early: more than the rule limit, or a `use` cycle (reported by
  // the checker); `rules` is then a prefix.
  bool truncated = false;
};

// The rules of `policy` with its parameters bound to `bound`, `use`s expanded in place. An
// unknown `use` target (or the policy itself) adds nothing (the checker reports it); a
// `use` with a problem adds nothing either. Stops (truncated) after `max_rules` + 1 rules or
// 4 * `max_rules` items (`use`s count: fan-out of empty policies cannot make it exponential).
LinkedPolicy LinkPolicy(const PolicyDecl& policy, const ParamValues& bound, PolicyResolver& resolver,
                        const CompileOptions& options, int max_rules);

// A policy's declared parameter defaults.
ParamValues DefaultValues(const PolicyDecl& policy);

// The link stage's value: `policy` linked with its own parameters unbound (the analysis
// reasons over them; the code generator and the evaluator bind them with WithParams), up
// to the larger of CompileOptions::max_rules and max_analyzed_rules.
LinkedPolicy LinkOpen(const PolicyDecl& policy, PolicyResolver& resolver, const CompileOptions& options);

// `linked` with `params` as the values of its policy's own parameters (its own rules:
// LinkedRule::via is null); the rules of used policies keep their `use`'s values.
LinkedPolicy WithParams(LinkedPolicy linked, const ParamValues& params);

// What the expansion of one policy amounts to, computed once per policy.
struct LinkSummary {
  int64_t items = 0;      // rules and `use`s after expansion (capped at 2^40)
  int depth = 0;          // the deepest chain of `use`s (and `extends`)
  bool can_drop = false;  // a rule (not `drop when false`) can decide drop
  bool can_watch = false;  // a rule (not `watch when false`) can decide watch
};
// `use` and `extends` cycles add nothing (the checker reports them as GP2008).
class LinkSummaries {
 public:
  explicit LinkSummaries(PolicyResolver& resolver) : resolver_(resolver) {}
  const LinkSummary& Of(const PolicyDecl& policy);

 private:
  PolicyResolver& resolver_;
  std::map<const PolicyDecl*, LinkSummary> memo_;
};

}  // namespace guardpolicy
