// linker.cpp: `use` and `extends` expansion, the one place that resolves a `use` (an `extends`
// is one, at the end of the body) and binds its arguments; and what an `extends` inherits.
#include "guardpolicy/linker.h"

#include <algorithm>
#include <set>

namespace guardpolicy {
namespace {

// The policy `use` in `from` names, or null when unknown or `from` itself.
const PolicyDecl* Target(const Use& use, const PolicyDecl& from, PolicyResolver& resolver) {
  const PolicyDecl* target = from.module ? resolver.Resolve(use.target, *from.module) : nullptr;
  return target == &from ? nullptr : target;
}

// A literal that is exactly `false` can never fire.
bool IsFalseLiteral(const Expr* e) {
  return e && e->kind == ExprKind::kLiteral && e->literal.kind == Literal::Kind::kBool && !e->literal.b;
}

class Linker {
 public:
  Linker(LinkedPolicy& out, PolicyResolver& resolver, const CompileOptions& options, int max_rules)
      : out_(out), resolver_(resolver), options_(options), max_rules_(max_rules) {}

  void Expand(const PolicyDecl& p, const ParamValues& bound, int depth, const Use* via, const Use* filter_use) {
    if (!on_path_.insert(&p).second) {  // a cycle (GP2008)
      out_.truncated = true;
      return;
    }
    for (const Item& item : p.items) {
      // Items visited, `use`s of empty policies too: fan-out cannot make this exponential.
      if (++visited_ > 4 * static_cast<int64_t>(max_rules_)) out_.truncated = true;
      if (out_.truncated) break;
      if (item.kind == Item::Kind::kUse) {
        ExpandUse(item.use, p, depth, via, filter_use);
        continue;
      }
      if (out_.rules.size() > static_cast<size_t>(max_rules_)) {
        out_.truncated = true;
        break;
      }
      out_.rules.push_back({&item.rule, &p, bound, via, filter_use});
    }
    // The base's rules after the policy's own: its `extends` is a `use` at the end.
    if (p.extends && !out_.truncated) {
      if (++visited_ > 4 * static_cast<int64_t>(max_rules_)) {
        out_.truncated = true;
      } else {
        ExpandUse(*p.extends, p, depth, via, filter_use);
      }
    }
    on_path_.erase(&p);
  }

 private:
  // The rules `use` (a `use` item or the `extends` clause of `p`) brings in, with its arguments.
  void ExpandUse(const Use& use, const PolicyDecl& p, int depth, const Use* via,
                 const Use* filter_use) {
    const PolicyDecl* target = Target(use, p, resolver_);
    if (target == nullptr) return;  // reported by the checker
    if (depth >= options_.max_use_depth) {
      out_.problems.push_back({LinkProblem::Kind::kTooDeep, &use, target, ""});
      return;
    }
    ParamValues args = DefaultValues(*target);
    for (const Arg& a : use.args) args[a.name] = a.value;
    const auto missing = std::find_if(target->params.begin(), target->params.end(),
                                      [&](const Param& param) { return !args.count(param.name); });
    if (missing != target->params.end()) {
      out_.problems.push_back({LinkProblem::Kind::kMissingValue, &use, target, missing->name});
      return;
    }
    const bool filter = target->module && !target->module->plugin.empty();
    Expand(*target, args, depth + 1, via ? via : &use, filter_use || !filter ? filter_use : &use);
  }

  LinkedPolicy& out_;
  PolicyResolver& resolver_;
  const CompileOptions& options_;
  const int max_rules_;
  int64_t visited_ = 0;
  std::set<const PolicyDecl*> on_path_;
};

}  // namespace

ParamValues DefaultValues(const PolicyDecl& policy) {
  ParamValues values;
  for (const Param& p : policy.params) {
    if (p.default_value) values[p.name] = *p.default_value;
  }
  return values;
}

const PolicyDecl* BaseOf(const PolicyDecl& policy, PolicyResolver& resolver) {
  return policy.extends ? Target(*policy.extends, policy, resolver) : nullptr;
}

Inherited Inherit(const PolicyDecl& policy, PolicyResolver& resolver) {
  Inherited out;
  std::set<const PolicyDecl*> seen;
  for (const PolicyDecl* p = &policy; p != nullptr && seen.insert(p).second;
       p = BaseOf(*p, resolver)) {
    out.chain.push_back(p);
    if (!out.default_decision && p->default_decision) {
      out.default_decision = p->default_decision;
      out.default_owner = p;
    }
    InheritRuntimeSettings(out.runtime, p->runtime);
  }
  return out;
}

LinkedPolicy LinkPolicy(const PolicyDecl& policy, const ParamValues& bound, PolicyResolver& resolver,
                        const CompileOptions& options, int max_rules) {
  LinkedPolicy out;
  out.policy = &policy;
  out.settings = Inherit(policy, resolver);
  Linker(out, resolver, options, max_rules).Expand(policy, bound, 0, nullptr, nullptr);
  return out;
}

LinkedPolicy LinkOpen(const PolicyDecl& policy, PolicyResolver& resolver, const CompileOptions& options) {
  return LinkPolicy(policy, ParamValues{}, resolver, options, std::max(options.max_rules, options.max_analyzed_rules));
}

LinkedPolicy WithParams(LinkedPolicy linked, const ParamValues& params) {
  for (LinkedRule& rule : linked.rules) {
    if (rule.via == nullptr) rule.bound = params;
  }
  return linked;
}

const LinkSummary& LinkSummaries::Of(const PolicyDecl& p) {
  if (auto it = memo_.find(&p); it != memo_.end()) return it->second;
  memo_[&p] = LinkSummary{};  // in progress: a cycle adds nothing
  LinkSummary s;
  // Each `use` (and the `extends`) counts too: a fan-out of empty policies is as costly to
  // expand. The used policy's default is not inlined: only its rules can drop here (an
  // inherited default is the checker's, through Inherit).
  const auto add = [&](const Use& use) {
    const PolicyDecl* target = Target(use, p, resolver_);
    if (target == nullptr) return;
    const LinkSummary inner = Of(*target);  // a copy: memo_ may grow
    s.items = std::min<int64_t>(s.items + 1 + inner.items, int64_t{1} << 40);
    s.depth = std::max(s.depth, inner.depth + 1);
    s.can_drop |= inner.can_drop;
    s.can_watch |= inner.can_watch;
  };
  for (const Item& item : p.items) {
    if (item.kind == Item::Kind::kUse) {
      add(item.use);
      continue;
    }
    ++s.items;
    const bool fires = !IsFalseLiteral(item.rule.condition.get());
    s.can_drop |= item.rule.decision == Decision::kDrop && fires;
    s.can_watch |= item.rule.decision == Decision::kWatch && fires;
  }
  if (p.extends) add(*p.extends);
  return memo_[&p] = s;
}

}  // namespace guardpolicy
