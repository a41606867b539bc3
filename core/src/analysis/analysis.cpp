// analysis.cpp: reachability, redundancy and risk findings for one policy.
#include "guardpolicy/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "formula.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/evaluator.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/printer.h"
#include "name_literals.h"
#include "watch_findings.h"

namespace guardpolicy {
namespace {

using analysis::FormulaPtr;
using Bound = ParamValues;

// One rule after `use` expansion, with where to report it.
struct FlatRule {
  const Rule* rule = nullptr;
  const PolicyDecl* owner = nullptr;  // the policy that wrote it
  SourceRange site;                   // the rule, or the top-level `use` that brought it in
  bool own = false;                   // written in the analyzed policy itself
  FormulaPtr cond;
  std::string key;                    // canonical condition text
  Bound bound;                        // parameter values inside the rule's policy
};

// What each guard type risks when its guard is dropped (torch 2.13 semantics).
struct Risk {
  const char* guard_type;
  const char* what;
};
constexpr Risk kRisks[] = {
    {"SHAPE_ENV", "every symbolic-shape guard is in it: inputs of other sizes reuse code "
                  "specialized for the first sizes"},
    {"GLOBAL_STATE", "changes of grad mode, autocast, default dtype, deterministic algorithms "
                     "and num_threads go unnoticed"},
};

class Analyzer {
 public:
  Analyzer(const LinkedPolicy& linked, const Schema& schema, RuleEvaluator& evaluator,
           const CompileOptions& options, Diagnostics& diags)
      : linked_(linked), policy_(*linked.policy), schema_(schema), evaluator_(evaluator), options_(options),
        diags_(diags), vocab_(schema) {
    vocab_.SetBudget(options.analysis_budget);
  }

  void Run() {
    analysis::CheckNameLiterals(policy_, diags_);
    if (!Flatten()) return;
    axioms_ = vocab_.Axioms();
    CheckRules();
    CheckRisks();
    CheckUnusedParams();
    ComputeTypeMasks();
  }

  AnalysisResult result() const { return {unreachable_, type_masks_}; }

 private:
  // The policy's rules after `use` expansion (the link stage's); a truncated expansion (a
  // cycle, or over the analysis limits) is not analyzed.
  bool Flatten() {
    if (linked_.truncated || linked_.rules.size() > static_cast<size_t>(options_.max_analyzed_rules)) return false;
    for (const LinkedRule& l : linked_.rules) {
      FlatRule r;
      r.rule = l.rule;
      r.owner = l.owner;
      r.site = l.site();
      r.own = l.via == nullptr;
      r.cond = vocab_.FromExpr(*l.rule->condition, l.bound);
      r.bound = l.bound;
      r.key = std::string(DecisionName(l.rule->decision)) + " when " + PrintExpr(*l.rule->condition, &l.bound);
      rules_.push_back(std::move(r));
    }
    return true;
  }

  bool Sat(const FormulaPtr& f) {
    // Over budget counts as satisfiable: no finding is claimed without a proof.
    return vocab_.Satisfiable(analysis::And(axioms_, f)).value_or(true);
  }

  // Entries that reach rule i (no earlier rule matched) and match it.
  FormulaPtr Reach(size_t i) const {
    FormulaPtr f = rules_[i].cond;
    for (size_t j = 0; j < i; ++j) f = analysis::And(f, analysis::Not(rules_[j].cond));
    return f;
  }
  FormulaPtr ReachDefault() const {
    FormulaPtr f = analysis::Const(true);
    for (const FlatRule& r : rules_) f = analysis::And(f, analysis::Not(r.cond));
    return f;
  }

  // Per rule, the guard types its condition can hold for, with no facts about torch; a
  // question over budget counts as "can".
  void ComputeTypeMasks() {
    analysis::Vocabulary pure(schema_, /*exact_guard_source=*/false);
    pure.SetBudget(options_.analysis_budget / 4);
    const auto& members = schema_.enums()[schema_.FindEnum("GuardType")].members;
    for (const FlatRule& r : rules_) {
      const FormulaPtr cond = pure.FromExpr(*r.rule->condition, r.bound);
      uint64_t mask = 0;
      for (size_t v = 0; v < members.size(); ++v) {
        if (pure.Satisfiable(analysis::And(cond, pure.GuardTypeIs(members[v]))) != false) mask |= uint64_t{1} << v;
      }
      if (pure.Satisfiable(analysis::And(cond, pure.GuardTypeOther())) != false) mask |= uint64_t{1} << 63;
      type_masks_.push_back(mask);
    }
  }

  // Unreachable by logic alone, with no facts about torch at all (every field free):
  // then the optimized bytecode decides like the unoptimized one on every possible input.
  void NoteIfRemovable(size_t i) {
    analysis::Vocabulary pure(schema_, /*exact_guard_source=*/false);
    pure.SetBudget(options_.analysis_budget / 8);
    FormulaPtr reach = pure.FromExpr(*rules_[i].rule->condition, rules_[i].bound);
    for (size_t j = 0; j < i; ++j) {
      reach = analysis::And(reach, analysis::Not(pure.FromExpr(*rules_[j].rule->condition, rules_[j].bound)));
    }
    if (pure.Satisfiable(reach) == false) unreachable_.push_back(static_cast<int>(i));
  }

  void CheckRules() {
    for (size_t i = 0; i < rules_.size(); ++i) {
      const FlatRule& r = rules_[i];
      if (!r.own) continue;
      if (!Sat(r.cond)) {
        NoteIfRemovable(i);
        diags_.Warning(codes::kAlwaysFalse, r.rule->condition->range, "condition is always false",
                       "this rule never fires; remove it or fix the condition");
        continue;
      }
      if (!Sat(Reach(i))) {
        NoteIfRemovable(i);
        ReportCovered(i);
        continue;
      }
      if (!Sat(analysis::Not(r.cond))) {
        const bool more = i + 1 < rules_.size() || linked_.settings.default_decision.has_value();
        diags_.Warning(codes::kAlwaysTrue, r.rule->condition->range, "condition is always true",
                       more ? "every guard is decided here: later rules and the default never apply"
                            : "write `default " + std::string(DecisionName(r.rule->decision)) + "` instead");
      }
    }
  }

  void ReportCovered(size_t i) {
    const FlatRule& r = rules_[i];
    for (size_t j = 0; j < i; ++j) {
      if (rules_[j].key == r.key) {
        diags_.Warning(codes::kDuplicateRule, r.rule->range, "duplicate rule", "remove it",
                       {{rules_[j].site, "the same rule"}});
        return;
      }
    }
    std::vector<RelatedLocation> related;
    for (size_t j = 0; j < i; ++j) {
      if (!Sat(analysis::And(r.cond, analysis::Not(rules_[j].cond)))) {
        related.push_back({rules_[j].site, rules_[j].own ? "covered by this rule"
                                                         : "covered by a rule of `" + rules_[j].owner->name + "`"});
        break;
      }
    }
    if (related.empty()) {
      for (size_t j = 0; j < i; ++j) related.push_back({rules_[j].site, "together with the other earlier rules"});
      related.resize(std::min<size_t>(related.size(), 3));
      related.front().message = "covered by earlier rules together, starting here";
    }
    diags_.Warning(codes::kShadowedRule, r.rule->range, "rule can never fire: earlier rules decide every entry it matches",
                   "remove it, or move it before the rules that cover it", std::move(related));
  }

  // GP3009 when nothing is kept; GP3007 and GP3008 per drop site (a drop rule, a `use`, or
  // `default drop`) and risk; GP3012 per watch site that watches what no watcher can see.
  void CheckRisks() {
    CheckDropsEverything();
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (rules_[i].own && rules_[i].rule->decision == Decision::kDrop) CheckNoOp(i);
    }
    const std::vector<std::optional<Decided>> ambient = DecideAmbient();
    CheckAmbientRisks(ambient);
    for (const auto& [site, reach] : Sites(Decision::kDrop)) CheckSiteRisks(site, reach);
    CheckWatchedAmbient(ambient);
    for (const auto& [site, reach] : Sites(Decision::kWatch)) CheckWatchedInputs(site, reach);
  }

  void CheckDropsEverything() {
    // Entries torch keeps: reaching a keep or watch rule, or the default when it does not drop.
    FormulaPtr kept = analysis::Const(false);
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (KeptByTorch(rules_[i].rule->decision)) kept = analysis::Or(kept, Reach(i));
    }
    if (KeptByTorch(linked_.settings.EffectiveDefault())) kept = analysis::Or(kept, ReachDefault());
    if (!Sat(kept)) {  // said once; the specific risks below still name what goes stale
      diags_.Warning(codes::kDropsEverything, policy_.name_range,
                     fmt::format("policy `{}` drops every guard", policy_.name),
                     "the compiled code then runs whatever changes: shapes, dtypes, globals, modules, grad mode");
    }
  }

  // Where the policy decides `d`, with the entries decided there: each rule deciding `d`
  // (the rules one `use` brought in, one site), then the default when it decides `d`.
  std::vector<std::pair<SourceRange, FormulaPtr>> Sites(Decision d) const {
    std::vector<std::pair<SourceRange, FormulaPtr>> sites;
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (rules_[i].rule->decision != d) continue;
      if (!sites.empty() && sites.back().first.begin == rules_[i].site.begin) {
        sites.back().second = analysis::Or(sites.back().second, Reach(i));
      } else {
        sites.emplace_back(rules_[i].site, Reach(i));
      }
    }
    if (linked_.settings.EffectiveDefault() == d) sites.emplace_back(DefaultSite(), ReachDefault());
    return sites;
  }

  // The policy's own `default` line; an inherited one is reported at its `extends` clause.
  SourceRange DefaultSite() const {
    const PolicyDecl* owner = linked_.settings.default_owner;
    if (owner == &policy_ && policy_.default_range.valid()) return policy_.default_range;
    if (owner != nullptr && policy_.extends) return policy_.extends->range;
    return policy_.name_range;
  }

  void CheckSiteRisks(const SourceRange& site, const FormulaPtr& reach) {
    if (Sat(analysis::And(reach, analysis::InputTensorGuard(vocab_)))) {
      diags_.Warning(codes::kRiskyDrop, site, "can drop `TENSOR_MATCH` guards on input tensors",
                     "an input's dtype, device, shape, strides or requires_grad can then change under the "
                     "compiled code");
    }
    if (Sat(analysis::And(reach, analysis::InputValueGuard(vocab_)))) {
      diags_.Warning(codes::kRiskyDrop, site,
                     "can drop `CONSTANT_MATCH`, `EQUALS_MATCH` or `TYPE_MATCH` guards on non-tensor inputs",
                     "a changed flag, number, string or dict entry passed as an argument (a "
                     "transformer_options-style dict) then reuses code traced for the old value; keep them "
                     "with `keep when guard_source == LOCAL and not value.is_tensor` first");
    }
  }

  // GP3012 when the entries `reach` watches at `site` can be an input tensor's guards (the
  // runtime watches the attributes of an object passed in, by the object's identity, but a
  // tensor's metadata is held in no dict).
  void CheckWatchedInputs(const SourceRange& site, const FormulaPtr& reach) {
    if (Sat(analysis::And(reach, analysis::InputTensorGuard(vocab_))))
      analysis::ReportWatchedInputs(site, {"TENSOR_MATCH"}, diags_);
  }

  // An ambient guard (`SHAPE_ENV` from ShapeEnvSource, the others from GlobalStateSource):
  // every core field is known (name "", no value, not global, depth 0, no user frame, no
  // derived types), so the policy is simply run on it.
  static EntryLiterals AmbientEntry(std::string_view guard_type) {
    const bool shape = guard_type == "SHAPE_ENV";
    auto text = [](std::string_view s) {
      return Literal{Literal::Kind::kString, std::string(s), 0, false, {}};
    };
    return {{"guard_type", text(guard_type)},
            {"guard_source", text(shape ? "SHAPE_ENV" : "GLOBAL")},
            {"source.kind", text(shape ? "ShapeEnvSource" : "GlobalStateSource")},
            {"source.root", text(shape ? "ShapeEnvSource" : "GlobalStateSource")}};
  }

  // What the policy (default parameters) decides on each of kAmbientGuardTypes, through the
  // evaluator (evaluator.h); nothing when a parameter has no default. A plugin field or
  // filter that needs the Python entry leaves an entry's question open (nullopt).
  std::vector<std::optional<Decided>> DecideAmbient() {
    for (const Param& p : policy_.params) {
      if (!p.default_value) return {};  // no values to run with
    }
    std::vector<EntryLiterals> entries;
    for (const std::string_view type : analysis::kAmbientGuardTypes)
      entries.push_back(AmbientEntry(type));
    return evaluator_.Decide(linked_, entries);
  }

  SourceRange SiteOf(const Decided& decided) const {
    const bool by_rule = decided.rule >= 0 && static_cast<size_t>(decided.rule) < rules_.size();
    return by_rule ? rules_[decided.rule].site : DefaultSite();
  }

  // GP3008 on the dropped SHAPE_ENV and GLOBAL_STATE guards.
  void CheckAmbientRisks(const std::vector<std::optional<Decided>>& decided) {
    for (const Risk& risk : kRisks) {
      const std::optional<Decided>* d = AmbientDecision(decided, risk.guard_type);
      if (d == nullptr || !*d || (*d)->decision != Decision::kDrop) continue;
      diags_.Warning(codes::kRiskyDrop, SiteOf(**d),
                     fmt::format("drops the `{}` guard", risk.guard_type),
                     fmt::format("{}; keep it with `keep when guard_type == {}` first", risk.what,
                                 risk.guard_type));
    }
  }

  // GP3012 per site that watches ambient guards, naming them in kAmbientGuardTypes' order.
  void CheckWatchedAmbient(const std::vector<std::optional<Decided>>& decided) {
    std::vector<std::pair<SourceRange, std::vector<std::string_view>>> sites;
    for (size_t i = 0; i < decided.size() && i < std::size(analysis::kAmbientGuardTypes); ++i) {
      if (!decided[i] || decided[i]->decision != Decision::kWatch) continue;
      const SourceRange site = SiteOf(*decided[i]);
      auto it = std::find_if(sites.begin(), sites.end(), [&](const auto& s) {
        return s.first.begin == site.begin && s.first.end == site.end;
      });
      if (it == sites.end()) it = sites.insert(sites.end(), {site, {}});
      it->second.push_back(analysis::kAmbientGuardTypes[i]);
    }
    for (const auto& [site, types] : sites) analysis::ReportWatchedAmbient(site, types, diags_);
  }

  static const std::optional<Decided>* AmbientDecision(
      const std::vector<std::optional<Decided>>& decided, std::string_view type) {
    for (size_t i = 0; i < decided.size() && i < std::size(analysis::kAmbientGuardTypes); ++i) {
      if (analysis::kAmbientGuardTypes[i] == type) return &decided[i];
    }
    return nullptr;
  }

  void CheckNoOp(size_t i) {
    // GRAD_MODE, DETERMINISTIC_ALGORITHMS and FSDP_TRAINING_STATE emit no check of their own
    // (torch/_dynamo/guards.py: "we always guard on this via GlobalStateGuard()").
    FormulaPtr noop = analysis::Or(analysis::Or(vocab_.GuardTypeIs("GRAD_MODE"),
                                                vocab_.GuardTypeIs("DETERMINISTIC_ALGORITHMS")),
                                   vocab_.GuardTypeIs("FSDP_TRAINING_STATE"));
    const FormulaPtr reach = Reach(i);
    if (Sat(reach) && !Sat(analysis::And(reach, analysis::Not(noop)))) {
      diags_.Warning(codes::kNoOpDrop, rules_[i].rule->range, "this drop does nothing on its own",
                     "GLOBAL_STATE checks grad mode and deterministic algorithms; drop `GLOBAL_STATE` "
                     "to stop checking them");
    }
  }

  static bool Uses(const Expr& e, const std::string& param) {
    if (e.kind == ExprKind::kPath && e.resolved.kind == Resolution::Kind::kParam && e.path == param) return true;
    for (const auto& k : e.kids) {
      if (Uses(*k, param)) return true;
    }
    return false;
  }

  void CheckUnusedParams() {
    for (const Param& p : policy_.params) {
      bool used = false;
      for (const Item& item : policy_.items) {
        used |= item.kind == Item::Kind::kRule && Uses(*item.rule.condition, p.name);
      }
      if (!used) {
        diags_.Warning(codes::kUnusedParameter, p.range, fmt::format("parameter `{}` is never used", p.name),
                       "remove it, or use it in a rule");
      }
    }
  }

  const LinkedPolicy& linked_;
  const PolicyDecl& policy_;
  const Schema& schema_;
  RuleEvaluator& evaluator_;
  const CompileOptions& options_;
  Diagnostics& diags_;
  analysis::Vocabulary vocab_;
  FormulaPtr axioms_;
  std::vector<FlatRule> rules_;
  std::vector<int> unreachable_;
  std::vector<uint64_t> type_masks_;
};

}  // namespace

AnalysisResult AnalyzePolicy(const LinkedPolicy& linked, const Schema& schema, RuleEvaluator& evaluator,
                             const CompileOptions& options, Diagnostics& diags) {
  Analyzer analyzer(linked, schema, evaluator, options, diags);
  analyzer.Run();
  return analyzer.result();
}

}  // namespace guardpolicy
