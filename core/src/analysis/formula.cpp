// formula.cpp: building formulas from conditions, and a budgeted satisfiability search.
#include "formula.h"

#include <iterator>

#include <functional>

#include "guardpolicy/printer.h"

namespace guardpolicy::analysis {
namespace {

FormulaPtr Make(Formula f) { return std::make_shared<const Formula>(std::move(f)); }

// GuardSource predicates that are pure functions of the member (torch/_guards.py, 2.8+).
// `is_specialized_nn_module` also depends on a config switch, so it stays an atom.
const std::map<std::string, std::vector<std::string>, std::less<>>& GuardSourcePredicates() {
  static const std::map<std::string, std::vector<std::string>, std::less<>> preds = {
      {"guard_source.is_local",
       {"LOCAL", "LOCAL_SPECIALIZED_NN_MODULE", "LOCAL_FSDP_MODULE", "LOCAL_UNSPECIALIZED_NN_MODULE",
        "LOCAL_UNSPECIALIZED_BUILTIN_NN_MODULE"}},
      {"guard_source.is_unspecialized_nn_module",
       {"LOCAL_UNSPECIALIZED_NN_MODULE", "GLOBAL_UNSPECIALIZED_NN_MODULE",
        "LOCAL_UNSPECIALIZED_BUILTIN_NN_MODULE", "GLOBAL_UNSPECIALIZED_BUILTIN_NN_MODULE"}},
      {"guard_source.is_unspecialized_builtin_nn_module",
       {"LOCAL_UNSPECIALIZED_BUILTIN_NN_MODULE", "GLOBAL_UNSPECIALIZED_BUILTIN_NN_MODULE"}},
      {"guard_source.is_fsdp_module", {"LOCAL_FSDP_MODULE", "GLOBAL_FSDP_MODULE"}},
  };
  return preds;
}

enum class Tri : int8_t { kFalse = 0, kTrue = 1, kUnknown = 2 };

struct Assignment {
  std::vector<int> enums;      // value index or -1
  std::vector<int8_t> atoms;   // 0/1 or -1
};

// Three-valued evaluation; `pick` receives the first unassigned variable seen
// (enum k as k, atom i as enums.size() + i).
Tri Eval(const Formula& f, const Assignment& a, int& pick) {
  switch (f.kind) {
    case Formula::Kind::kConst: return f.value ? Tri::kTrue : Tri::kFalse;
    case Formula::Kind::kEnumIn: {
      const int v = a.enums[f.var];
      if (v < 0) {
        if (pick < 0) pick = f.var;
        return Tri::kUnknown;
      }
      return (f.members >> v) & 1 ? Tri::kTrue : Tri::kFalse;
    }
    case Formula::Kind::kAtom: {
      const int v = a.atoms[f.var];
      if (v < 0) {
        if (pick < 0) pick = static_cast<int>(a.enums.size()) + f.var;
        return Tri::kUnknown;
      }
      return v ? Tri::kTrue : Tri::kFalse;
    }
    case Formula::Kind::kNot: {
      const Tri t = Eval(*f.kids[0], a, pick);
      return t == Tri::kUnknown ? t : (t == Tri::kTrue ? Tri::kFalse : Tri::kTrue);
    }
    case Formula::Kind::kAnd:
    case Formula::Kind::kOr: {
      const bool is_and = f.kind == Formula::Kind::kAnd;
      const Tri absorbing = is_and ? Tri::kFalse : Tri::kTrue;
      Tri result = is_and ? Tri::kTrue : Tri::kFalse;
      for (const FormulaPtr& k : f.kids) {
        const Tri t = Eval(*k, a, pick);
        if (t == absorbing) return absorbing;
        if (t == Tri::kUnknown) result = Tri::kUnknown;
      }
      return result;
    }
  }
  return Tri::kUnknown;
}

// The distinct membership signatures of enum variable `var` over all kEnumIn leaves: one
// representative value per class is enough to decide satisfiability.
void CollectMasks(const Formula& f, int var, std::vector<uint64_t>& masks) {
  if (f.kind == Formula::Kind::kEnumIn && f.var == var) masks.push_back(f.members);
  for (const FormulaPtr& k : f.kids) CollectMasks(*k, var, masks);
}

}  // namespace

FormulaPtr Const(bool v) { return Make({Formula::Kind::kConst, v, -1, 0, {}}); }
FormulaPtr And(FormulaPtr a, FormulaPtr b) { return Make({Formula::Kind::kAnd, false, -1, 0, {a, b}}); }
FormulaPtr Or(FormulaPtr a, FormulaPtr b) { return Make({Formula::Kind::kOr, false, -1, 0, {a, b}}); }
FormulaPtr Not(FormulaPtr a) { return Make({Formula::Kind::kNot, false, -1, 0, {a}}); }

Vocabulary::Vocabulary(const Schema& schema, bool exact_guard_source)
    : schema_(schema), exact_guard_source_(exact_guard_source) {}

int Vocabulary::EnumVarFor(int enum_index) {
  for (size_t i = 0; i < enum_vars_.size(); ++i) {
    if (enum_vars_[i].enum_index == enum_index) return static_cast<int>(i);
  }
  enum_vars_.push_back({enum_index, static_cast<int>(schema_.enums()[enum_index].members.size()) + 1});
  return static_cast<int>(enum_vars_.size() - 1);
}

FormulaPtr Vocabulary::Atom(const std::string& key) {
  auto [it, inserted] = atoms_.emplace(key, static_cast<int>(atoms_.size()));
  return Make({Formula::Kind::kAtom, false, it->second, 0, {}});
}

FormulaPtr Vocabulary::UnknownMember(int var, std::string_view field, std::string_view name) {
  // The value is "other" (last index), and this name among the others.
  const uint64_t other = uint64_t{1} << (enum_vars_[var].domain - 1);
  return And(Make({Formula::Kind::kEnumIn, false, var, other, {}}),
             Atom(std::string(field) + " == " + std::string(name)));
}

int Vocabulary::MemberIndex(int enum_index, std::string_view name) const {
  return schema_.enums()[enum_index].Find(name);
}

FormulaPtr Vocabulary::GuardTypeIs(std::string_view member) {
  const int e = schema_.FindEnum("GuardType");
  const int idx = MemberIndex(e, member);
  const int var = EnumVarFor(e);
  if (idx < 0) return UnknownMember(var, "guard_type", member);
  return Make({Formula::Kind::kEnumIn, false, var, uint64_t{1} << idx, {}});
}

FormulaPtr Vocabulary::GuardTypeOther() {
  const int var = EnumVarFor(schema_.FindEnum("GuardType"));
  return Make({Formula::Kind::kEnumIn, false, var, uint64_t{1} << (enum_vars_[var].domain - 1), {}});
}

FormulaPtr Vocabulary::GuardSourceIn(const std::vector<std::string>& members) {
  const int e = schema_.FindEnum("GuardSource");
  uint64_t mask = 0;
  for (const std::string& m : members) {
    const int idx = MemberIndex(e, m);
    if (idx >= 0) mask |= uint64_t{1} << idx;
  }
  return Make({Formula::Kind::kEnumIn, false, EnumVarFor(e), mask, {}});
}

FormulaPtr Vocabulary::BoolField(const std::string& field) {
  auto pred = GuardSourcePredicates().find(field);
  if (exact_guard_source_ && pred != GuardSourcePredicates().end()) return GuardSourceIn(pred->second);
  return Atom(field);
}

FormulaPtr Vocabulary::Axioms() {
  // Ambient guards (kAmbientGuardTypes) have name "" and no value, and their source is
  // GlobalStateSource (GLOBAL) or ShapeEnvSource (SHAPE_ENV).
  FormulaPtr ambient = GuardTypeIs(kAmbientGuardTypes[0]);
  for (size_t i = 1; i < std::size(kAmbientGuardTypes); ++i)
    ambient = Or(ambient, GuardTypeIs(kAmbientGuardTypes[i]));
  FormulaPtr facts = Or(Not(ambient), And(Not(Atom("is_global")), Not(Atom("has_value"))));
  facts = And(facts, Or(Not(GuardTypeIs("SHAPE_ENV")), GuardSourceIn({"SHAPE_ENV"})));
  // is_global: the source's root is a GlobalSource, whose guard source is global.
  facts = And(facts, Or(Not(Atom("is_global")),
                        GuardSourceIn({"GLOBAL", "GLOBAL_SPECIALIZED_NN_MODULE", "GLOBAL_FSDP_MODULE",
                                       "GLOBAL_UNSPECIALIZED_NN_MODULE",
                                       "GLOBAL_UNSPECIALIZED_BUILTIN_NN_MODULE"})));
  // TENSOR_MATCH guards a tensor; a parameter is a tensor; a tensor is a value.
  facts = And(facts, Or(Not(GuardTypeIs("TENSOR_MATCH")), Atom("value.is_tensor")));
  facts = And(facts, Or(Not(Atom("value.is_parameter")), Atom("value.is_tensor")));
  facts = And(facts, Or(Not(Atom("value.is_tensor")), Atom("has_value")));
  // A module is no tensor, nor is a value of a built-in class (builtins.NoneType, ...).
  facts = And(facts, Or(Not(Atom("value.is_module")), Not(Atom("value.is_tensor"))));
  for (const int atom : builtin_type_atoms_) {
    facts = And(facts, Or(Not(Make({Formula::Kind::kAtom, false, atom, 0, {}})), Not(Atom("value.is_tensor"))));
  }
  return facts;
}

std::string Vocabulary::Key(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound) const {
  return PrintExpr(e, &bound);
}

FormulaPtr Vocabulary::EnumLeaf(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound) {
  // e is `field ==/!= member` or `field (not) in {...}` over an enum field.
  const Expr& field = *e.kids[0];
  const int enum_index = field.type.enum_index;
  const int var = EnumVarFor(enum_index);
  uint64_t mask = 0;
  FormulaPtr unknown = Const(false);
  auto add = [&](const Expr& member) {
    std::string name = member.kind == ExprKind::kPath ? member.path : member.literal.str;
    if (member.resolved.kind == Resolution::Kind::kParam) {
      auto it = bound.find(member.path);
      if (it == bound.end()) {
        unknown = Or(unknown, Atom(Key(e, bound)));
        return;
      }
      name = it->second.str;
    }
    const int idx = MemberIndex(enum_index, name);
    if (idx >= 0) mask |= uint64_t{1} << idx;
    else unknown = Or(unknown, UnknownMember(var, field.path, name));
  };
  if (e.kind == ExprKind::kCompare) add(*e.kids[1]);
  else for (size_t i = 1; i < e.kids.size(); ++i) add(*e.kids[i]);
  FormulaPtr f = Or(Make({Formula::Kind::kEnumIn, false, var, mask, {}}), unknown);
  const bool negated = (e.kind == ExprKind::kCompare && e.op == BinaryOp::kNe) ||
                       (e.kind == ExprKind::kIn && e.negated);
  return negated ? Not(f) : f;
}

FormulaPtr Vocabulary::FromExpr(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      if (e.literal.kind == Literal::Kind::kBool) return Const(e.literal.b);
      break;
    case ExprKind::kPath:
      if (e.resolved.kind == Resolution::Kind::kParam) {
        auto it = bound.find(e.path);
        if (it != bound.end() && it->second.kind == Literal::Kind::kBool) return Const(it->second.b);
        return Atom("param " + e.path);
      }
      if (e.resolved.kind == Resolution::Kind::kField) return BoolField(e.path);
      break;
    case ExprKind::kNot: return Not(FromExpr(*e.kids[0], bound));
    case ExprKind::kAnd: return And(FromExpr(*e.kids[0], bound), FromExpr(*e.kids[1], bound));
    case ExprKind::kOr: return Or(FromExpr(*e.kids[0], bound), FromExpr(*e.kids[1], bound));
    case ExprKind::kCompare:
    case ExprKind::kIn: {
      const Expr& lhs = *e.kids[0];
      const bool enum_field = lhs.kind == ExprKind::kPath && lhs.resolved.kind == Resolution::Kind::kField &&
                              lhs.type.kind == TypeKind::kEnum;
      const bool eq = e.kind == ExprKind::kIn || e.op == BinaryOp::kEq || e.op == BinaryOp::kNe;
      bool literal_rhs = true;
      for (size_t i = 1; i < e.kids.size(); ++i) {
        literal_rhs &= e.kids[i]->resolved.kind != Resolution::Kind::kField;
      }
      if (enum_field && eq && literal_rhs) return EnumLeaf(e, bound);
      break;
    }
    default: break;
  }
  FormulaPtr atom = Atom(Key(e, bound));
  if (OnlyBuiltinTypes(e, bound)) builtin_type_atoms_.insert(atom->var);
  return atom;
}

// `value.type == "builtins.X"`, `value.type in {"builtins.X", ...}` or `value.type
// startswith "builtins."`: the value's class is a Python built-in, so it is no tensor.
bool Vocabulary::OnlyBuiltinTypes(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound) const {
  const bool eq = e.kind == ExprKind::kCompare && e.op == BinaryOp::kEq;
  const bool in = e.kind == ExprKind::kIn && !e.negated;
  const bool prefix = e.kind == ExprKind::kStringOp && e.op == BinaryOp::kStartsWith;
  if (!(eq || in || prefix) || e.kids.size() < 2) return false;
  const Expr& lhs = *e.kids[0];
  if (lhs.kind != ExprKind::kPath || lhs.resolved.kind != Resolution::Kind::kField || lhs.path != "value.type") {
    return false;
  }
  for (size_t i = 1; i < e.kids.size(); ++i) {
    const Expr& k = *e.kids[i];
    std::string_view text;
    if (k.kind == ExprKind::kLiteral && k.literal.kind == Literal::Kind::kString) {
      text = k.literal.str;
    } else if (k.kind == ExprKind::kPath && k.resolved.kind == Resolution::Kind::kParam) {
      auto it = bound.find(k.path);
      if (it == bound.end() || it->second.kind != Literal::Kind::kString) return false;
      text = it->second.str;
    } else {
      return false;
    }
    if (!text.starts_with("builtins.")) return false;
  }
  return true;
}

std::optional<bool> Vocabulary::Satisfiable(const FormulaPtr& f) {
  Assignment a;
  a.enums.assign(enum_vars_.size(), -1);
  a.atoms.assign(atoms_.size(), -1);
  std::function<std::optional<bool>()> search = [&]() -> std::optional<bool> {
    if (--budget_ < 0) return std::nullopt;
    int pick = -1;
    const Tri t = Eval(*f, a, pick);
    if (t != Tri::kUnknown) return t == Tri::kTrue;
    if (pick < static_cast<int>(a.enums.size())) {
      std::vector<uint64_t> masks;
      CollectMasks(*f, pick, masks);
      std::map<std::vector<bool>, int> classes;  // signature -> representative value
      for (int v = 0; v < enum_vars_[pick].domain; ++v) {
        std::vector<bool> sig;
        for (uint64_t m : masks) sig.push_back((m >> v) & 1);
        classes.emplace(std::move(sig), v);
      }
      bool unknown = false;
      for (const auto& [sig, v] : classes) {
        a.enums[pick] = v;
        const auto r = search();
        if (r == true) return true;
        unknown |= !r.has_value();
      }
      a.enums[pick] = -1;
      return unknown ? std::nullopt : std::optional<bool>(false);
    }
    const int atom = pick - static_cast<int>(a.enums.size());
    bool unknown = false;
    for (int8_t v : {int8_t{1}, int8_t{0}}) {
      a.atoms[atom] = v;
      const auto r = search();
      if (r == true) {
        a.atoms[atom] = -1;
        return true;
      }
      unknown |= !r.has_value();
    }
    a.atoms[atom] = -1;
    return unknown ? std::nullopt : std::optional<bool>(false);
  };
  return search();
}

}  // namespace guardpolicy::analysis
