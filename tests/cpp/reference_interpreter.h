// reference_interpreter.h: a small, obviously-correct interpreter of checked policy ASTs.
//
// The reference the differential tests and the benchmark compare the bytecode VM against:
// it walks the AST directly (first matching rule decides, `use` expands in place with the
// used policy's parameters bound, an `extends`'s base's rules come after the policy's own, the
// default, its own or its nearest base's, decides last) with no compilation at all.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>

#include <re2/re2.h>

#include "guardpolicy/policy.h"
#include "guardpolicy/snapshot.h"
#include "guardpolicy/vm.h"
#include "../../core/src/checker/glob.h"

namespace guardpolicy::testing {

using guardpolicy::FieldValues;

class ReferenceInterpreter {
 public:
  ReferenceInterpreter(const Schema& schema, PolicyResolver& resolver) : schema_(schema), resolver_(resolver) {}

  // The decision and the 0-based index (after `use` expansion) of the deciding rule, or -1.
  Outcome Run(const PolicyDecl& policy, const ParamValues& params, const FieldValues& entry) {
    ParamValues bound;
    for (const Param& p : policy.params) {
      if (p.default_value) bound[p.name] = *p.default_value;
    }
    for (const auto& [k, v] : params) bound[k] = v;
    int index = 0;
    if (auto d = RunItems(policy, bound, entry, index, 0)) return *d;
    return {DefaultOf(policy), -1};
  }

 private:
  std::optional<Outcome> RunItems(const PolicyDecl& p, const ParamValues& bound, const FieldValues& entry,
                                  int& index, int depth) {
    for (const Item& item : p.items) {
      if (item.kind == Item::Kind::kRule) {
        const int mine = index++;
        if (Eval(*item.rule.condition, bound, entry).i) return Outcome{item.rule.decision, mine};
        continue;
      }
      if (auto d = RunUse(p, item.use, entry, index, depth)) return d;
    }
    if (p.extends) return RunUse(p, *p.extends, entry, index, depth);
    return std::nullopt;
  }

  std::optional<Outcome> RunUse(const PolicyDecl& p, const Use& use, const FieldValues& entry,
                                int& index, int depth) {
    const PolicyDecl* target = p.module ? resolver_.Resolve(use.target, *p.module) : nullptr;
    if (target == nullptr || target == &p || depth >= 16) return std::nullopt;
    ParamValues args;
    for (const Param& param : target->params) {
      if (param.default_value) args[param.name] = *param.default_value;
    }
    for (const Arg& a : use.args) args[a.name] = a.value;
    return RunItems(*target, args, entry, index, depth + 1);
  }

  // The first `default` line along the `extends` chain; `keep` when none has one.
  Decision DefaultOf(const PolicyDecl& policy) {
    const PolicyDecl* p = &policy;
    for (int hops = 0; p != nullptr && hops < 64; ++hops) {
      if (p->default_decision) return *p->default_decision;
      p = p->extends && p->module ? resolver_.Resolve(p->extends->target, *p->module) : nullptr;
    }
    return Decision::kKeep;
  }

  // Literal text lives in the AST, which outlives every evaluation.
  Value LiteralValue(const Literal& lit, const Type& type) {
    if (type.kind == TypeKind::kEnum) return Value{schema_.enums()[type.enum_index].Find(lit.str), 0, lit.str};
    if (lit.kind == Literal::Kind::kString) return Value{0, 0, lit.str};
    return Value{lit.kind == Literal::Kind::kBool ? (lit.b ? 1 : 0) : lit.i, 0, {}};
  }

  static bool EnumEq(const Value& a, const Value& b) { return a.i >= 0 && b.i >= 0 ? a.i == b.i : a.s == b.s; }

  static Value B(bool b) { return Value{b ? 1 : 0, 0, {}}; }

  Value Eval(const Expr& e, const ParamValues& bound, const FieldValues& entry) {
    switch (e.kind) {
      case ExprKind::kLiteral: return LiteralValue(e.literal, e.type);
      case ExprKind::kPath:
        if (e.resolved.kind == Resolution::Kind::kField) return entry.at(e.path);
        if (e.resolved.kind == Resolution::Kind::kParam) return LiteralValue(bound.at(e.path), e.type);
        return Value{schema_.enums()[e.type.enum_index].Find(e.path), 0, e.path};
      case ExprKind::kNot: return B(!Eval(*e.kids[0], bound, entry).i);
      case ExprKind::kAnd: return B(Eval(*e.kids[0], bound, entry).i && Eval(*e.kids[1], bound, entry).i);
      case ExprKind::kOr: return B(Eval(*e.kids[0], bound, entry).i || Eval(*e.kids[1], bound, entry).i);
      case ExprKind::kCompare: {
        const Value a = Eval(*e.kids[0], bound, entry), b = Eval(*e.kids[1], bound, entry);
        const TypeKind k = e.kids[0]->type.kind;
        const bool eq = k == TypeKind::kEnum ? EnumEq(a, b) : k == TypeKind::kString ? a.s == b.s : a.i == b.i;
        switch (e.op) {
          case BinaryOp::kEq: return B(eq);
          case BinaryOp::kNe: return B(!eq);
          case BinaryOp::kLt: return B(a.i < b.i);
          case BinaryOp::kLe: return B(a.i <= b.i);
          case BinaryOp::kGt: return B(a.i > b.i);
          default: return B(a.i >= b.i);
        }
      }
      case ExprKind::kIn: {
        const Value v = Eval(*e.kids[0], bound, entry);
        const TypeKind k = e.kids[0]->type.kind;
        bool found = false;
        for (size_t i = 1; i < e.kids.size(); ++i) {
          const Value m = Eval(*e.kids[i], bound, entry);
          found |= k == TypeKind::kEnum ? EnumEq(v, m) : k == TypeKind::kString ? v.s == m.s : v.i == m.i;
        }
        return B(found != e.negated);
      }
      case ExprKind::kStringOp: return StringOp(e, bound, entry);
      case ExprKind::kCall: break;  // plugin calls: the generated policies make none
    }
    return B(false);
  }

  Value StringOp(const Expr& e, const ParamValues& bound, const FieldValues& entry) {
    const Value a = Eval(*e.kids[0], bound, entry);
    if (e.op == BinaryOp::kContains && e.kids[0]->type.kind == TypeKind::kEnumSet) {
      const Value m = Eval(*e.kids[1], bound, entry);
      if (m.i >= 0) return B((a.bits >> m.i) & 1);
      const std::string needle = std::string(kSetSeparator) + std::string(m.s) + kSetSeparator;
      return B(!m.s.empty() && std::string(a.s).find(needle) != std::string::npos);
    }
    const Value b = Eval(*e.kids[1], bound, entry);
    switch (e.op) {
      case BinaryOp::kContains: return B(a.s.find(b.s) != std::string_view::npos);
      case BinaryOp::kStartsWith: return B(a.s.substr(0, b.s.size()) == b.s);
      case BinaryOp::kEndsWith: return B(a.s.size() >= b.s.size() && a.s.substr(a.s.size() - b.s.size()) == b.s);
      case BinaryOp::kMatches: return B(RE2::PartialMatch(a.s, Regex(std::string(b.s))));
      default: return B(RE2::FullMatch(a.s, Regex(checker_internal::GlobToRegex(b.s).regex)));
    }
  }

  // Patterns compile once per interpreter (as the VM's do once per program).
  const RE2& Regex(const std::string& pattern) {
    auto& slot = regexes_[pattern];
    if (!slot) slot = std::make_unique<RE2>(pattern);
    return *slot;
  }

  const Schema& schema_;
  PolicyResolver& resolver_;
  std::deque<std::string> strings_;
  std::map<std::string, std::unique_ptr<RE2>> regexes_;
};

}  // namespace guardpolicy::testing
