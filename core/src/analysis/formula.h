// formula.h: conditions as propositional formulas over a finite abstraction of an entry.
//
// Each enum field (guard_type, guard_source) is one variable over its members plus
// "other"; the GuardSource predicates are functions of guard_source. Every other leaf
// (a bool field, a string or int test, a parameter) is an independent boolean atom, keyed
// by its canonical text so that equal tests share an atom. Treating atoms as independent
// over-approximates the real entries, so "unsatisfiable" answers are sound: a rule called
// unreachable really is. Satisfiability is decided by case splitting with a node budget;
// over budget the answer is "unknown" and no finding is reported.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "guardpolicy/ast.h"
#include "guardpolicy/schema.h"

namespace guardpolicy::analysis {

// The ambient guard types: torch 2.13 makes them on ShapeEnvSource (SHAPE_ENV) or
// GlobalStateSource (the others: output_graph.py init_ambient_guards, the DUAL_LEVEL and
// FSDP_TRAINING_STATE context managers of variables/ctx_manager.py), with name "" and no
// value. SHAPE_ENV and GLOBAL_STATE, first, are the ones GP3008 names when dropped; the
// order is the one findings name them in.
inline constexpr std::string_view kAmbientGuardTypes[] = {
    "SHAPE_ENV",
    "GLOBAL_STATE",
    "GRAD_MODE",
    "DETERMINISTIC_ALGORITHMS",
    "TORCH_FUNCTION_STATE",
    "DEFAULT_DEVICE",
    "AUTOGRAD_SAVED_TENSORS_HOOKS",
    "FSDP_TRAINING_STATE",
    "FUNCTORCH_STACK_MATCH",
    "DUAL_LEVEL",
};

struct Formula;
using FormulaPtr = std::shared_ptr<const Formula>;

struct Formula {
  enum class Kind : uint8_t { kConst, kAnd, kOr, kNot, kEnumIn, kAtom };
  Kind kind = Kind::kConst;
  bool value = false;          // kConst
  int var = -1;                // kEnumIn: enum variable; kAtom: atom index
  uint64_t members = 0;        // kEnumIn: allowed values (bit per value index)
  std::vector<FormulaPtr> kids;
};

FormulaPtr Const(bool v);
FormulaPtr And(FormulaPtr a, FormulaPtr b);
FormulaPtr Or(FormulaPtr a, FormulaPtr b);
FormulaPtr Not(FormulaPtr a);

// The variables of one analysis: enum variables and named atoms.
class Vocabulary {
 public:
  // `exact_guard_source`: the GuardSource predicates are functions of guard_source (true of
  // torch 2.8-2.13); false treats them as independent atoms (no knowledge of torch at all).
  explicit Vocabulary(const Schema& schema, bool exact_guard_source = true);

  // Builds the formula of a checked condition; `bound` parameters become constants
  // (bools) or are folded into atom keys; unbound ones become atoms.
  FormulaPtr FromExpr(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound);

  // guard_type == member (member may be unknown to the schema: then "other").
  FormulaPtr GuardTypeIs(std::string_view member);
  FormulaPtr GuardSourceIn(const std::vector<std::string>& members);
  // guard_type is none of the schema's members (a third-party guard type).
  FormulaPtr GuardTypeOther();
  FormulaPtr BoolField(const std::string& field);
  // Facts torch guarantees about real entries (ambient guards are not global, ...), over
  // the atoms of the conditions built so far (build them first).
  FormulaPtr Axioms();

  // Some assignment satisfies `f`: true, false, or nullopt when the budget (shared by all
  // questions asked of this vocabulary) runs out.
  std::optional<bool> Satisfiable(const FormulaPtr& f);
  void SetBudget(int64_t nodes) { budget_ = nodes; }

 private:
  struct EnumVar {
    int enum_index = -1;
    int domain = 0;  // schema members + 1 ("other")
  };
  int EnumVarFor(int enum_index);
  FormulaPtr Atom(const std::string& key);
  FormulaPtr EnumLeaf(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound);
  std::string Key(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound) const;
  bool OnlyBuiltinTypes(const Expr& e, const std::map<std::string, Literal, std::less<>>& bound) const;
  int MemberIndex(int enum_index, std::string_view name) const;
  // `field == name` for a name outside the schema's members (open enums).
  FormulaPtr UnknownMember(int var, std::string_view field, std::string_view name);

  const Schema& schema_;
  std::vector<EnumVar> enum_vars_;
  std::map<std::string, int> atoms_;
  std::set<int> builtin_type_atoms_;  // atoms that hold only for values of built-in classes
  int64_t budget_ = 2000000;
  bool exact_guard_source_ = true;
};

}  // namespace guardpolicy::analysis
