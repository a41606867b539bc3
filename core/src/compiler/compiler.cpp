// compiler.cpp: the compile stage (compiler.h's Compile): checked AST -> predicate bytecode.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "guardpolicy/compiler.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/pattern_checks.h"

namespace guardpolicy {
namespace {

class CodeGen {
 public:
  CodeGen(ProgramImage& prog, const Schema& schema, Diagnostics& diags, const CompileOptions& options)
      : prog_(prog), schema_(schema), diags_(diags), options_(options) {}

  // The linked rules, in order; a `use` the linker left out is an error here (the checker
  // has said so already).
  void CompileRules(LinkedPolicy linked) {
    linked_ = std::move(linked);
    for (const LinkProblem& problem : linked_.problems) {
      if (problem.kind == LinkProblem::Kind::kTooDeep) {
        diags_.Error(codes::kUseCycle, problem.use->range,
                     fmt::format("`use` nested deeper than {} levels", options_.max_use_depth));
      } else {
        diags_.Error(codes::kBadParameter, problem.use->range,
                     fmt::format("`use {}` needs a value for parameter `{}`", problem.target->name, problem.param));
      }
    }
    for (const LinkedRule& rule : linked_.rules) {
      if (prog_.rules.size() > static_cast<size_t>(options_.max_rules)) return;  // reported
      CompileRule(rule);
    }
  }

  // The default: the policy's own `default` line, or the one it inherits (reported at the
  // base's line, in the base's file), or `keep` at the policy's name.
  void EmitDefault(const LinkedPolicy& linked) {
    const PolicyDecl& policy = *linked.policy;
    const PolicyDecl* owner = linked.settings.default_owner;
    prog_.default_decision = linked.settings.EffectiveDefault();
    const SourceRange& r =
        owner && owner->default_range.valid() ? owner->default_range : policy.name_range;
    prog_.default_file = r.file ? r.file->path() : "";
    prog_.default_line = r.start().line;
    Emit(Opcode::kDecide, static_cast<int>(prog_.default_decision), -1);
  }

 private:
  struct Label {
    std::vector<size_t> patches;
  };

  size_t Emit(Opcode op, int32_t a = 0, int32_t b = 0) {
    prog_.code.push_back({op, a, b});
    return prog_.code.size() - 1;
  }
  void EmitJump(Opcode op, Label& label) { label.patches.push_back(Emit(op)); }
  void Bind(Label& label) {
    for (size_t pc : label.patches) prog_.code[pc].a = static_cast<int32_t>(prog_.code.size());
    label.patches.clear();
  }

  void CompileRule(const LinkedRule& linked) {
    const Rule& rule = *linked.rule;
    if (static_cast<int>(prog_.rules.size()) >= options_.max_rules) {
      if (prog_.rules.size() == static_cast<size_t>(options_.max_rules)) {
        diags_.Error(codes::kTooManyRules, rule.range,
                     fmt::format("over {} rules after `use` expansion", options_.max_rules));
        prog_.rules.push_back({});
      }
      return;
    }
    // A plugin filter's rule is reported where the policy uses it (its own source is made up).
    const SourceRange& where = linked.filter_use ? linked.filter_use->range : rule.range;
    const LineCol lc = where.start();
    prog_.rules.push_back({linked.owner->name, where.file ? where.file->path() : "", lc.line, lc.col, rule.decision});
    bound_ = &linked.bound;
    prog_.rule_entry.push_back(static_cast<int32_t>(prog_.code.size()));
    Label next;
    Branch(*rule.condition, false, next);
    Emit(Opcode::kDecide, static_cast<int>(rule.decision), static_cast<int>(prog_.rules.size() - 1));
    Bind(next);
  }

  // Emits code that jumps to `label` when `e` evaluates to `jump_if`, else falls through.
  // Constant parts (literals, bound bool parameters) fold away, so their fields are never
  // loaded.
  void Branch(const Expr& e, bool jump_if, Label& label) {
    if (auto c = ConstantBool(e)) {
      if (*c == jump_if) EmitJump(Opcode::kJump, label);
      return;
    }
    switch (e.kind) {
      case ExprKind::kNot: Branch(*e.kids[0], !jump_if, label); return;
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        const bool is_and = e.kind == ExprKind::kAnd;
        // `true and x` is x; `false or x` is x.
        if (ConstantBool(*e.kids[0]) == is_and) return Branch(*e.kids[1], jump_if, label);
        if (ConstantBool(*e.kids[1]) == is_and) return Branch(*e.kids[0], jump_if, label);
        if (jump_if != is_and) {  // and/false or or/true: either side decides
          Branch(*e.kids[0], jump_if, label);
          Branch(*e.kids[1], jump_if, label);
        } else {
          Label skip;
          Branch(*e.kids[0], !jump_if, skip);
          Branch(*e.kids[1], jump_if, label);
          Bind(skip);
        }
        return;
      }
      default: break;
    }
    Value(e);
    EmitJump(jump_if ? Opcode::kJumpIfTrue : Opcode::kJumpIfFalse, label);
  }

  std::optional<bool> ConstantBool(const Expr& e) const {
    switch (e.kind) {
      case ExprKind::kLiteral:
        if (e.literal.kind == Literal::Kind::kBool) return e.literal.b;
        return std::nullopt;
      case ExprKind::kPath:
        if (e.resolved.kind == Resolution::Kind::kParam) {
          auto it = bound_->find(e.path);
          if (it != bound_->end() && it->second.kind == Literal::Kind::kBool) return it->second.b;
        }
        return std::nullopt;
      case ExprKind::kNot:
        if (auto c = ConstantBool(*e.kids[0])) return !*c;
        return std::nullopt;
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        const bool is_and = e.kind == ExprKind::kAnd;
        const auto a = ConstantBool(*e.kids[0]);
        const auto b = ConstantBool(*e.kids[1]);
        if (a == !is_and || b == !is_and) return !is_and;  // absorbing element
        if (a && b) return is_and;
        return std::nullopt;
      }
      default:
        return std::nullopt;
    }
  }

  // Pushes the value of `e`.
  void Value(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        Emit(Opcode::kPushConst, ConstFromLiteral(e.literal, e.type));
        return;
      case ExprKind::kPath: return PathValue(e);
      case ExprKind::kNot:
      case ExprKind::kAnd:
      case ExprKind::kOr: return MaterializeBool(e);
      case ExprKind::kCompare: return CompareValue(e);
      case ExprKind::kIn: return InValue(e);
      case ExprKind::kStringOp: return StringOpValue(e);
      case ExprKind::kCall: return CallValue(e);
    }
  }

  // A filter reads as a bool field slot per (filter, bound arguments); a function pushes its
  // arguments and calls.
  void CallValue(const Expr& e) {
    const FunctionInfo& fn = schema_.functions()[e.resolved.index];
    if (fn.is_filter) {
      std::vector<Constant> args;
      std::string key = fn.name;
      for (size_t i = 0; i < fn.args.size(); ++i) {
        Literal lit = i < e.kids.size() ? e.kids[i]->literal : fn.arg_defaults[i].value_or(Literal{});
        if (i < e.kids.size() && e.kids[i]->kind == ExprKind::kPath) {
          auto it = bound_->find(e.kids[i]->path);
          if (it != bound_->end()) lit = it->second;
        }
        const Constant& c = prog_.constants[ConstFromLiteral(lit, fn.args[i])];
        args.push_back(c);
        key += fmt::format("\x1f{}\x1f{}\x1f{}", static_cast<int>(c.type.kind), c.i, c.s);
      }
      auto [it, inserted] = filter_slots_.emplace(key, static_cast<int>(prog_.fields.size()));
      if (inserted) {
        prog_.fields.push_back(fn.name);
        prog_.field_types.push_back(Type::Bool());
        prog_.field_args.push_back(std::move(args));
      }
      Emit(Opcode::kLoadField, it->second);
      return;
    }
    for (const auto& a : e.kids) Value(*a);
    int32_t index = -1;
    for (size_t i = 0; i < prog_.functions.size(); ++i) {
      if (prog_.functions[i].name == fn.name) index = static_cast<int32_t>(i);
    }
    if (index < 0) {
      prog_.functions.push_back({fn.name, fn.args, fn.result});
      index = static_cast<int32_t>(prog_.functions.size() - 1);
    }
    Emit(Opcode::kCall, index, static_cast<int32_t>(e.kids.size()));
  }

  void PathValue(const Expr& e) {
    switch (e.resolved.kind) {
      case Resolution::Kind::kField:
        Emit(Opcode::kLoadField, Slot(e.resolved.index));
        return;
      case Resolution::Kind::kParam: {
        auto it = bound_->find(e.path);
        Emit(Opcode::kPushConst, it == bound_->end() ? ConstFromLiteral({}, e.type)
                                                     : ConstFromLiteral(it->second, e.type));
        return;
      }
      case Resolution::Kind::kEnumLiteral:
      case Resolution::Kind::kNone:
        Emit(Opcode::kPushConst, EnumConst(e.type.enum_index, e.path));
        return;
      case Resolution::Kind::kFunction:
        // The checker resolves a function only as a call's callee (CallValue), never a value.
        diags_.Error(codes::kInternal, e.range,
                     fmt::format("internal error: function `{}` used as a value", e.path));
        return;
    }
  }

  void MaterializeBool(const Expr& e) {
    Label is_false, end;
    Branch(e, false, is_false);
    Emit(Opcode::kPushConst, Intern({Type::Bool(), 1, 0, {}}));
    EmitJump(Opcode::kJump, end);
    Bind(is_false);
    Emit(Opcode::kPushConst, Intern({Type::Bool(), 0, 0, {}}));
    Bind(end);
  }

  void CompareValue(const Expr& e) {
    Value(*e.kids[0]);
    Value(*e.kids[1]);
    const bool eq = e.op == BinaryOp::kEq;
    switch (e.kids[0]->type.kind) {
      case TypeKind::kBool: Emit(eq ? Opcode::kEqBool : Opcode::kNeBool); return;
      case TypeKind::kString: Emit(eq ? Opcode::kEqStr : Opcode::kNeStr); return;
      case TypeKind::kEnum: Emit(eq ? Opcode::kEqEnum : Opcode::kNeEnum); return;
      default: break;
    }
    static constexpr Opcode kIntOps[] = {Opcode::kEqInt, Opcode::kNeInt, Opcode::kLtInt,
                                         Opcode::kLeInt, Opcode::kGtInt, Opcode::kGeInt};
    Emit(kIntOps[static_cast<int>(e.op)]);
  }

  void InValue(const Expr& e) {
    Value(*e.kids[0]);
    ConstSet set;
    set.elem = e.kids[0]->type;
    for (size_t i = 1; i < e.kids.size(); ++i) AddToSet(set, *e.kids[i]);
    std::sort(set.strings.begin(), set.strings.end());
    std::sort(set.ints.begin(), set.ints.end());
    prog_.sets.push_back(std::move(set));
    Emit(Opcode::kInSet, static_cast<int32_t>(prog_.sets.size() - 1));
    if (e.negated) Emit(Opcode::kNot);
  }

  // Enum members go in by name; the enum_bitsets pass moves known ones to the mask.
  void AddToSet(ConstSet& set, const Expr& el) {
    if (set.elem.kind == TypeKind::kEnum) {
      set.strings.push_back(el.kind == ExprKind::kPath ? el.path : el.literal.str);
    } else if (set.elem.kind == TypeKind::kInt) {
      set.ints.push_back(el.literal.i);
    } else {
      set.strings.push_back(el.literal.str);
    }
  }

  void StringOpValue(const Expr& e) {
    const Expr& lhs = *e.kids[0];
    const Expr& rhs = *e.kids[1];
    Value(lhs);
    if (e.op == BinaryOp::kMatches || e.op == BinaryOp::kGlob) {
      Emit(Opcode::kMatches, RegexIndex(rhs, e.op));
      return;
    }
    Value(rhs);
    switch (e.op) {
      case BinaryOp::kContains:
        Emit(lhs.type.kind == TypeKind::kEnumSet ? Opcode::kSetHas : Opcode::kContains);
        return;
      case BinaryOp::kStartsWith: Emit(Opcode::kStartsWith); return;
      default: Emit(Opcode::kEndsWith); return;
    }
  }

  int32_t RegexIndex(const Expr& pattern, BinaryOp op) {
    std::string text = pattern.literal.str;
    if (pattern.kind == ExprKind::kPath) {
      auto it = bound_->find(pattern.path);
      text = it == bound_->end() ? "" : it->second.str;
    }
    const std::string err = PatternError(text, op, options_.max_regex_bytes, &text);
    if (!err.empty()) diags_.Error(codes::kBadRegex, pattern.range, err, PatternHelp(op));
    auto it = std::find(prog_.regexes.begin(), prog_.regexes.end(), text);
    if (it != prog_.regexes.end()) return static_cast<int32_t>(it - prog_.regexes.begin());
    prog_.regexes.push_back(text);
    return static_cast<int32_t>(prog_.regexes.size() - 1);
  }

  int32_t Slot(int field_index) {
    auto [it, inserted] = slots_.emplace(field_index, static_cast<int>(prog_.fields.size()));
    if (inserted) {
      prog_.fields.push_back(schema_.fields()[field_index].name);
      prog_.field_types.push_back(schema_.fields()[field_index].type);
      prog_.field_args.emplace_back();
    }
    return it->second;
  }

  int32_t EnumConst(int enum_index, const std::string& name) {
    const int ordinal = schema_.enums()[enum_index].Find(name);
    return Intern({Type::Enum(enum_index), ordinal, 0, name});
  }

  int32_t ConstFromLiteral(const Literal& lit, const Type& type) {
    switch (type.kind) {
      case TypeKind::kEnum: return EnumConst(type.enum_index, lit.str);
      case TypeKind::kBool: return Intern({type, lit.b ? 1 : 0, 0, {}});
      case TypeKind::kInt: return Intern({type, lit.i, 0, {}});
      default: return Intern({Type::String(), 0, 0, lit.str});
    }
  }

  int32_t Intern(Constant c) {
    for (size_t i = 0; i < prog_.constants.size(); ++i) {
      const Constant& k = prog_.constants[i];
      if (k.type == c.type && k.i == c.i && k.bits == c.bits && k.s == c.s) return static_cast<int32_t>(i);
    }
    prog_.constants.push_back(std::move(c));
    return static_cast<int32_t>(prog_.constants.size() - 1);
  }

  ProgramImage& prog_;
  const Schema& schema_;
  Diagnostics& diags_;
  const CompileOptions& options_;
  const ParamValues* bound_ = nullptr;
  std::map<int, int> slots_;
  std::map<std::string, int> filter_slots_;
  LinkedPolicy linked_;  // the rules being compiled (bound_ points into it)
};

// Declared defaults overridden by `params`; unknown names, wrong types and missing values
// are GP4002 diagnostics.
ParamValues BindParams(const PolicyDecl& policy, const Schema& schema, const ParamValues& params,
                       Diagnostics& diags) {
  ParamValues bound;
  std::vector<std::string> names;
  for (const Param& p : policy.params) {
    names.push_back(p.name);
    if (p.default_value) bound[p.name] = *p.default_value;
  }
  for (const auto& [name, value] : params) {
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      const std::string best = ClosestMatch(name, names);
      diags.Error(codes::kParamValue, policy.name_range,
                  fmt::format("policy `{}` has no parameter `{}`", policy.name, name),
                  best.empty() ? "" : fmt::format("did you mean `{}`?", best));
      continue;
    }
    const Param& p = policy.params[it - names.begin()];
    const bool ok = (p.type.kind == TypeKind::kBool && value.kind == Literal::Kind::kBool) ||
                    (p.type.kind == TypeKind::kInt && value.kind == Literal::Kind::kInt) ||
                    ((p.type.kind == TypeKind::kString || p.type.kind == TypeKind::kEnum) &&
                     value.kind == Literal::Kind::kString);
    if (!ok) {
      diags.Error(codes::kParamValue, p.range,
                  fmt::format("parameter `{}` needs a {} value", name, schema.TypeName(p.type)));
      continue;
    }
    if (p.type.kind == TypeKind::kEnum) {
      const EnumInfo& e = schema.enums()[p.type.enum_index];
      if (const std::string near = NearMiss(value.str, e); !near.empty()) {
        diags.Error(codes::kParamValue, p.range,
                    fmt::format("`{}` is not a {} that torch 2.11 to 2.15 produces (parameter `{}`)", value.str, e.name, name),
                    fmt::format("did you mean `{}`?", near));
        continue;
      }
      if (!e.open && e.Find(value.str) < 0) {
        const std::string best = ClosestMatch(value.str, e.members);
        diags.Error(codes::kParamValue, p.range,
                    fmt::format("`{}` is not a {} (parameter `{}`)", value.str, e.name, name),
                    best.empty() ? "" : fmt::format("did you mean `{}`?", best));
        continue;
      }
    }
    bound[name] = value;
  }
  for (const Param& p : policy.params) {
    if (!bound.count(p.name)) {
      diags.Error(codes::kParamValue, p.range,
                  fmt::format("parameter `{}` of `{}` has no default and no value", p.name, policy.name));
    }
  }
  return bound;
}

}  // namespace

ProgramImage Compile(const LinkedPolicy& linked, const Schema& schema, const ParamValues& params,
                     Diagnostics& diags, const CompileOptions& options) {
  const PolicyDecl& policy = *linked.policy;
  ProgramImage prog;
  prog.policy_name = policy.name;
  const ParamValues bound = BindParams(policy, schema, params, diags);
  if (diags.HasErrors()) return prog;
  CodeGen gen(prog, schema, diags, options);
  gen.CompileRules(WithParams(linked, bound));
  gen.EmitDefault(linked);
  return prog;
}

}  // namespace guardpolicy
