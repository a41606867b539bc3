// checker.cpp: policy-level checks (parameters, use, extends, config, stance, unsafe, tests).
#include "guardpolicy/checker.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config_checks.h"
#include "expr_checker.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/linker.h"

namespace guardpolicy {
namespace {

using checker_internal::ExprChecker;

class PolicyChecker {
 public:
  // `uses_unchecked`: a same-file policy this one uses had errors (or is on a cycle), so
  // its rules cannot be analyzed or compiled.
  PolicyChecker(Module& module, PolicyDecl& policy, const Schema& schema, PolicyResolver& resolver,
                const CompileOptions& options, Diagnostics& diags, bool uses_unchecked)
      : module_(module),
        policy_(policy),
        schema_(schema),
        resolver_(resolver),
        options_(options),
        diags_(diags),
        exprs_(schema, policy, options, diags),
        uses_unchecked_(uses_unchecked),
        inherited_(Inherit(policy, resolver)) {}

  // Where in this policy's diagnostics the analysis' findings go; none: not analysable.
  std::optional<size_t> analysis_at() const { return analysis_at_; }

  void Run() {
    CheckParams();
    for (Item& item : policy_.items) {
      if (item.kind == Item::Kind::kRule) {
        CheckRule(item.rule);
      } else {
        CheckUse(item.use, "uses");
      }
    }
    if (policy_.extends) CheckUse(*policy_.extends, "extends");
    checker_internal::CheckConfigLines(policy_.runtime.config, schema_, exprs_, diags_);
    CheckStance();
    CheckOnRecompile();
    CheckRuntimeLines();
    CheckExpansion();
    CheckUnsafe();
  }

 private:
  void CheckParams() {
    std::set<std::string> seen;
    for (Param& p : policy_.params) {
      p.type = schema_.ParseType(p.type_name);
      if (p.type.is_error() || p.type.kind == TypeKind::kEnumSet) {
        p.type = Type::Error();
        diags_.Error(codes::kBadParameter, p.range,
                     fmt::format("unknown parameter type `{}`", p.type_name),
                     "parameters are bool, int, string, GuardType or GuardSource");
      } else if (p.default_value) {
        exprs_.CheckLiteral(*p.default_value, p.type, p.default_value->range);
      }
      if (!seen.insert(p.name).second) {
        diags_.Error(codes::kBadParameter, p.range, fmt::format("duplicate parameter `{}`", p.name));
      } else if (schema_.FindField(p.name) >= 0) {
        // It would hide the field in every rule of the policy.
        diags_.Error(codes::kBadParameter, p.range,
                     fmt::format("parameter `{}` has the name of a schema field", p.name),
                     "rename the parameter; rules would read it instead of the field");
      }
    }
  }

  void CheckRule(Rule& rule) {
    if (!rule.condition) return;
    const size_t first = diags_.size();
    const Type t = exprs_.Check(*rule.condition);
    // Operands are resolved in the order their types need (an enum member after the field
    // beside it), not always left to right: the findings are reported in source order.
    diags_.SortByPosition(first);
    if (!t.is_error() && t.kind != TypeKind::kBool) {
      diags_.Error(codes::kConditionNotBool, rule.condition->range,
                   fmt::format("a rule condition must be bool, found {}", schema_.TypeName(t)));
    }
  }

  // A `use` item, or the `extends` clause (`verb`: "uses", "extends").
  void CheckUse(const Use& use, const char* verb) {
    const PolicyDecl* target = resolver_.Resolve(use.target, module_);
    if (target == nullptr) {
      const std::string best = ClosestMatch(use.target, resolver_.KnownPolicies(module_));
      diags_.Error(codes::kUnknownPolicy, use.range, fmt::format("unknown policy `{}`", use.target),
                   best.empty() ? "policies come from this file or policies/std; filters from plugins as `<plugin>.<filter>`"
                                : fmt::format("did you mean `{}`?", best));
      return;
    }
    if (target == &policy_) {
      diags_.Error(codes::kUseCycle, use.range,
                   fmt::format("policy `{}` {} itself", policy_.name, verb));
      return;
    }
    CheckArgs(use, *target);
  }

  void CheckArgs(const Use& use, const PolicyDecl& target) {
    std::set<std::string> given;
    for (const Arg& arg : use.args) {
      if (!given.insert(arg.name).second) {
        diags_.Error(codes::kBadParameter, arg.range, fmt::format("parameter `{}` is given twice", arg.name));
        continue;
      }
      const Param* param = nullptr;
      for (const Param& p : target.params) {
        if (p.name == arg.name) param = &p;
      }
      if (param == nullptr) {
        std::vector<std::string> names;
        for (const Param& p : target.params) names.push_back(p.name);
        const std::string best = ClosestMatch(arg.name, names);
        diags_.Error(codes::kBadParameter, arg.range,
                     fmt::format("{} `{}` has no parameter `{}`",
                                 target.module && !target.module->plugin.empty() ? "filter" : "policy",
                                 target.name, arg.name),
                     best.empty() ? "" : fmt::format("did you mean `{}`?", best));
        continue;
      }
      exprs_.CheckLiteral(arg.value, param->type, arg.value.range);
    }
    // `use` arguments are literals: a parameter with no default and no argument has no
    // value in any load (the linker would leave the `use` out).
    for (const Param& p : target.params) {
      if (!p.default_value && !given.count(p.name)) {
        diags_.Error(codes::kBadParameter, use.range,
                     fmt::format("`use {}` needs a value for parameter `{}`", target.name, p.name),
                     fmt::format("write `use {}({} = ...)`", target.name, p.name));
      }
    }
  }

  void CheckStance() {
    const RuntimeSettings& rt = policy_.runtime;
    if (!rt.stance) return;
    const StanceSetting& s = *rt.stance;
    CheckKnownName(codes::kUnknownStance, s.stance, schema_.stances(), s.range, "stance");
    if (s.after_calls < 1) {
      diags_.Error(codes::kUnknownStance, s.range, "a stance needs at least 1 warm-up call");
    }
  }

  // `on_recompile <action>`: only with a `stance` line (its own or its base's); the action from
  // the schema's list.
  void CheckOnRecompile() {
    const RuntimeSettings& rt = policy_.runtime;
    if (!rt.on_recompile) return;
    if (!inherited_.runtime.stance) {
      diags_.Error(codes::kUnknownStance, rt.on_recompile->range,
                   "`on_recompile` without a `stance` line",
                   "add `stance skip_guard_eval_unsafe after N calls`: without it every call "
                   "evaluates every guard");
    }
    CheckKnownName(codes::kUnknownStance, rt.on_recompile->action, schema_.violation_actions(),
                   rt.on_recompile->range, "on_recompile action");
  }

  // `verify every N calls`, `on_violation <action>`, `dispatch <mode>`: the interval is at least
  // one call, the action and the mode come from the schema's lists; `on_violation` needs a
  // `verify` line (its own or its base's).
  void CheckRuntimeLines() {
    const RuntimeSettings& rt = policy_.runtime;
    if (rt.verify && rt.verify->every_calls < 1) {
      diags_.Error(codes::kBadVerify, rt.verify->range,
                   "`verify every N calls` needs N of at least 1");
    }
    if (rt.on_violation && !inherited_.runtime.verify) {
      diags_.Error(
          codes::kBadVerify, rt.on_violation->range,
          "`on_violation` without `verify every N calls`",
          "add `verify every N calls`, or pass verify=N and on_violation= to guardpolicy.compile");
    }
    if (rt.on_violation) {
      CheckKnownName(codes::kBadVerify, rt.on_violation->action, schema_.violation_actions(),
                     rt.on_violation->range, "on_violation action");
    }
    if (rt.dispatch) {
      CheckKnownName(codes::kUnknownDispatch, rt.dispatch->mode, schema_.dispatch_modes(),
                     rt.dispatch->range, "dispatch mode");
    }
  }

  void CheckKnownName(const char* code, const std::string& name, const std::vector<std::string>& known,
                      const SourceRange& range, const char* what) {
    if (std::find(known.begin(), known.end(), name) != known.end()) return;
    const std::string best = ClosestMatch(name, known);
    diags_.Error(code, range, fmt::format("unknown {} `{}`", what, name),
                 best.empty() ? fmt::format("one of: {}", fmt::join(known, ", ")) : fmt::format("did you mean `{}`?", best));
  }

  void CheckExpansion() {
    if (diags_.HasErrors()) return;
    // Memoized per policy (linker.h): fan-out (four `use`s per level, seventeen levels)
    // costs one visit per policy.
    const LinkSummary e = LinkSummaries(resolver_).Of(policy_);
    if (e.depth > options_.max_use_depth) {
      diags_.Error(codes::kUseCycle, policy_.name_range,
                   fmt::format("`use` chains of policy `{}` are {} levels deep, over the limit of {}", policy_.name,
                               e.depth, options_.max_use_depth));
    }
    if (e.items > options_.max_rules) {
      diags_.Error(codes::kTooManyRules, policy_.name_range,
                   fmt::format("policy `{}` expands to {} rules and `use`s, over the limit of {}", policy_.name,
                               e.items, options_.max_rules));
    }
  }

  // Where to report a line the policy may inherit: its own line, or its `extends` clause.
  const SourceRange& OwnOrExtends(const SourceRange& line) const {
    const bool own = line.file == policy_.range.file && line.begin >= policy_.range.begin &&
                     line.end <= policy_.range.end;
    return own || !policy_.extends ? line : policy_.extends->range;
  }

  // The proof of `unsafe`, over the policy with what it inherits (`extends`): its base's rules,
  // default, stance and config lines count as its own.
  void CheckUnsafe() {
    if (diags_.HasErrors()) return;  // analysis needs a well-typed policy
    if (!uses_unchecked_) {          // ... and well-typed policies under its `use`s
      analysis_at_ = diags_.size();
    }
    const bool can_drop = CanDrop(policy_, resolver_);
    const RuntimeSettings& rt = inherited_.runtime;
    if (rt.stance && !policy_.is_unsafe) {
      diags_.Error(
          codes::kDropsWithoutUnsafe, OwnOrExtends(rt.stance->range),
          fmt::format("policy `{}` skips guard evaluation after warm-up but is not marked `unsafe`",
                      policy_.name),
          "skip_guard_eval_unsafe can run stale compiled code; write `unsafe policy`");
      return;
    }
    const ConfigSetting* free = UnwatchedFreeTensors();
    if (free != nullptr && !policy_.is_unsafe) {
      diags_.Error(
          codes::kDropsWithoutUnsafe, OwnOrExtends(free->range),
          fmt::format(
              "policy `{}` installs free tensors without a `watch` but is not marked `unsafe`",
              policy_.name),
          "torch's guard on an installed tensor checks its metadata, not its identity: a second "
          "instance of a class, or the next block of a model compiled block by block, runs with "
          "the first one's weights; add `default watch` (guardpolicy.compile watches each "
          "tensor's identity) or write `unsafe policy`");
      return;
    }
    if (can_drop && !policy_.is_unsafe) {
      diags_.Error(codes::kDropsWithoutUnsafe, policy_.name_range,
                   fmt::format("policy `{}` can drop guards but is not marked `unsafe`", policy_.name),
                   "dropping a guard can run stale compiled code; write `unsafe policy`");
    } else if (!can_drop && policy_.is_unsafe && !rt.stance && free == nullptr) {
      diags_.Warning(codes::kUnsafeNeverDrops, policy_.name_range,
                     fmt::format("policy `{}` is marked `unsafe` but never drops a guard", policy_.name),
                     "remove `unsafe`");
    }
  }

  // The policy's `config install_free_tensors = true` (its own or inherited) when no rule of it
  // (or of a policy it uses or extends) and not its default can decide `watch`, else nullptr.
  const ConfigSetting* UnwatchedFreeTensors() const {
    if (inherited_.EffectiveDefault() == Decision::kWatch ||
        LinkSummaries(resolver_).Of(policy_).can_watch)
      return nullptr;
    for (const ConfigSetting& setting : inherited_.runtime.config)
      if (setting.knob == "install_free_tensors" && setting.value.kind == Literal::Kind::kBool && setting.value.b)
        return &setting;
    return nullptr;
  }

  Module& module_;
  PolicyDecl& policy_;
  const Schema& schema_;
  PolicyResolver& resolver_;
  const CompileOptions& options_;
  Diagnostics& diags_;
  ExprChecker exprs_;
  bool uses_unchecked_ = false;
  const Inherited inherited_;  // its `default` and runtime lines with its base's
  std::optional<size_t> analysis_at_;
};

void CheckDuplicatePolicies(const Module& module, Diagnostics& diags) {
  std::map<std::string, const PolicyDecl*> seen;
  for (const PolicyDecl& p : module.policies) {
    auto [it, inserted] = seen.emplace(p.name, &p);
    if (!inserted) {
      diags.Error(codes::kDuplicatePolicy, p.name_range,
                  fmt::format("policy `{}` is already defined at {}", p.name, it->second->name_range.ToString()));
    }
  }
}

// The same-module policies `p` names in a `use` or its `extends` (not itself), each with the
// clause that names it, in source order (`extends` last).
std::vector<std::pair<const Use*, PolicyDecl*>> SameModuleTargets(Module& module,
                                                                  const PolicyDecl& p) {
  std::vector<std::pair<const Use*, PolicyDecl*>> out;
  const auto add = [&](const Use& use) {
    for (PolicyDecl& target : module.policies) {
      if (target.name == use.target && &target != &p) {
        out.emplace_back(&use, &target);
        return;
      }
    }
  };
  for (const Item& item : p.items) {
    if (item.kind == Item::Kind::kUse) add(item.use);
  }
  if (p.extends) add(*p.extends);
  return out;
}

// Depth-first search over same-module `use` and `extends` edges; reports each cycle once.
void CheckUseCycles(Module& module, Diagnostics& diags) {
  enum class Mark { kNone, kActive, kDone };
  std::map<const PolicyDecl*, Mark> marks;
  std::function<void(const PolicyDecl&)> visit = [&](const PolicyDecl& p) {
    marks[&p] = Mark::kActive;
    for (const auto& [use, target] : SameModuleTargets(module, p)) {
      if (marks[target] == Mark::kActive) {
        const char* verb = use == (p.extends ? &*p.extends : nullptr) ? "extends" : "use";
        diags.Error(
            codes::kUseCycle, use->range,
            fmt::format("`{} {}` forms a cycle back to `{}`", verb, target->name, target->name));
      } else if (marks[target] == Mark::kNone) {
        visit(*target);
      }
    }
    marks[&p] = Mark::kDone;
  };
  for (const PolicyDecl& p : module.policies) {
    if (marks[&p] == Mark::kNone) visit(p);
  }
}

// The policies of `module`, each after the same-file policies it uses or extends (depth
// first; on a cycle, reported by CheckUseCycles, the policy reached again comes later).
std::vector<PolicyDecl*> UsesFirst(Module& module) {
  std::vector<PolicyDecl*> order;
  std::set<const PolicyDecl*> seen;
  std::function<void(PolicyDecl&)> visit = [&](PolicyDecl& p) {
    if (!seen.insert(&p).second) return;
    for (const auto& [use, target] : SameModuleTargets(module, p)) visit(*target);
    order.push_back(&p);
  };
  for (PolicyDecl& p : module.policies) visit(p);
  return order;
}

void CheckTests(const Module& module, const Schema& schema, Diagnostics& diags) {
  for (const TestDecl& t : module.tests) {
    if (module.FindPolicy(t.target) == nullptr) {
      diags.Error(codes::kUnknownPolicy, t.range, fmt::format("test names unknown policy `{}`", t.target));
    }
    for (const Expectation& ex : t.expectations) {
      for (const FieldInit& f : ex.fields) {
        const int field = schema.FindField(f.path);
        if (field < 0) {
          const std::string best = ClosestMatch(f.path, schema.FieldNames());
          diags.Error(codes::kUnknownTestField, f.range, fmt::format("unknown field `{}`", f.path),
                      best.empty() ? "" : fmt::format("did you mean `{}`?", best));
          continue;
        }
        const Type type = schema.fields()[field].type;
        if (type.kind == TypeKind::kEnumSet) {
          diags.Error(codes::kUnknownTestField, f.range,
                      fmt::format("field `{}` is a set; tests cannot set it yet", f.path));
          continue;
        }
        const PolicyDecl none;
        const CompileOptions options;
        checker_internal::ExprChecker literal_checker(schema, none, options, diags);
        literal_checker.CheckLiteral(f.value, type, f.value.range);
      }
    }
  }
}

}  // namespace

bool CanDrop(const PolicyDecl& policy, PolicyResolver& resolver) {
  return Inherit(policy, resolver).EffectiveDefault() == Decision::kDrop ||
         LinkSummaries(resolver).Of(policy).can_drop;
}

CheckResult Check(Module& module, const Schema& schema, PolicyResolver& resolver,
                  const CompileOptions& options) {
  CheckResult result;
  Diagnostics& diags = result.diagnostics;
  CheckDuplicatePolicies(module, diags);
  CheckUseCycles(module, diags);
  // Each policy is checked after the same-file policies it uses: its `use` arguments are
  // checked against their parameter types, and it is analysable only when they are. The
  // diagnostics still come in declaration order.
  std::map<const PolicyDecl*, Diagnostics> policy_diags;
  std::map<const PolicyDecl*, size_t> analysis_at;
  std::set<const PolicyDecl*> failed;  // errors of its own or in a policy it uses
  for (PolicyDecl* policy : UsesFirst(module)) {
    bool uses_unchecked = false;
    for (const auto& [use, target] : SameModuleTargets(module, *policy)) {
      uses_unchecked |= failed.count(target) > 0 || !policy_diags.count(target);
    }
    Diagnostics& own = policy_diags[policy];
    PolicyChecker checker(module, *policy, schema, resolver, options, own, uses_unchecked);
    checker.Run();
    if (checker.analysis_at()) analysis_at[policy] = *checker.analysis_at();
    if (uses_unchecked || own.HasErrors()) failed.insert(policy);
  }
  int rule_count = 0;
  for (const PolicyDecl& policy : module.policies) {
    if (auto at = analysis_at.find(&policy); at != analysis_at.end()) {
      result.analysable.push_back({&policy, diags.size() + at->second});
    }
    diags.Append(policy_diags[&policy]);
    rule_count += static_cast<int>(policy.items.size());
  }
  if (rule_count > options.max_rules) {
    diags.Error(codes::kTooManyRules, {module.file, 0, 0},
                fmt::format("{} rules, over the limit of {}", rule_count, options.max_rules));
  }
  CheckTests(module, schema, diags);
  return result;
}

}  // namespace guardpolicy
