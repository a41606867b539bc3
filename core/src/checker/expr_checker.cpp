// expr_checker.cpp: resolving paths and typing expressions.
#include "expr_checker.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <re2/re2.h>

#include "glob.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/display_text.h"

namespace guardpolicy::checker_internal {

void ExprChecker::Mismatch(const Expr& e, const std::string& what) {
  diags_.Error(codes::kTypeMismatch, e.range, what);
}

std::string ExprChecker::ClosestName(const std::string& name) const {
  std::vector<std::string> candidates = schema_.FieldNames();
  for (const Param& p : policy_.params) candidates.push_back(p.name);
  return ClosestMatch(name, candidates);
}

void ExprChecker::ReportUnknownName(const Expr& e) {
  const std::string best = ClosestName(e.path);
  diags_.Error(codes::kUnknownField, e.range, fmt::format("unknown field `{}`", e.path),
               best.empty() ? "see docs/schema.md for the fields a rule can read"
                            : fmt::format("did you mean `{}`?", best));
}

std::optional<Type> ExprChecker::TryResolveValue(Expr& e) {
  if (e.kind != ExprKind::kPath) return std::nullopt;
  for (size_t i = 0; i < policy_.params.size(); ++i) {
    if (policy_.params[i].name == e.path) {
      e.resolved = {Resolution::Kind::kParam, static_cast<int>(i)};
      return e.type = policy_.params[i].type;
    }
  }
  const int field = schema_.FindField(e.path);
  if (field < 0) return std::nullopt;
  e.resolved = {Resolution::Kind::kField, field};
  return e.type = schema_.fields()[field].type;
}

Type ExprChecker::CheckPathValue(Expr& e) {
  if (auto t = TryResolveValue(e)) return *t;
  ReportUnknownName(e);
  return e.type = Type::Error();
}

bool ExprChecker::CheckEnumName(std::string_view name, const EnumInfo& info, const SourceRange& where) {
  if (info.Find(name) >= 0) {
    if (const std::string_view since = info.SinceOf(name); !since.empty()) {
      diags_.Note(codes::kReleaseMember, where,
                  fmt::format("torch {} and later produce {} `{}`", since, info.name, name),
                  "on an older torch no guard has it, so this comparison is false there");
    }
    return true;
  }
  if (!info.open) {
    const std::string best = ClosestMatch(name, info.members);
    diags_.Error(codes::kUnknownEnumLiteral, where, fmt::format("unknown {} `{}`", info.name, name),
                 best.empty() ? fmt::format("see the {} members in docs/schema.md", info.name)
                              : fmt::format("did you mean `{}`?", best));
    return false;
  }
  // Open: a new name is allowed, but one a typo away from a known member is that typo (the
  // rule would silently never fire).
  if (const std::string best = NearMiss(name, info); !best.empty()) {
    diags_.Error(codes::kUnknownEnumLiteral, where, fmt::format("unknown {} `{}`", info.name, name),
                 fmt::format("did you mean `{}`?", best));
    return false;
  }
  diags_.Warning(codes::kUnknownGuardType, where,
                 fmt::format("`{}` is not a {} that torch 2.11 to 2.15 produces", name, info.name),
                 "third-party guard types are allowed; check the spelling");
  return true;
}

// `e` names a member of enum `enum_index`: a bare identifier or a string literal.
Type ExprChecker::ResolveEnumLiteral(Expr& e, int enum_index) {
  const EnumInfo& info = schema_.enums()[enum_index];
  const std::string& name = e.kind == ExprKind::kPath ? e.path : e.literal.str;
  if (!CheckEnumName(name, info, e.range)) return e.type = Type::Error();
  const int ordinal = info.Find(name);
  e.resolved = {Resolution::Kind::kEnumLiteral, ordinal};
  if (e.kind == ExprKind::kLiteral) e.literal.str = name;
  return e.type = Type::Enum(enum_index);
}

// Checks `e` where the other operand has type `other`: bare names and string literals
// become enum members when `other` is an enum. An `other` of error type (that operand was
// reported) poisons a bare name that names no value: it is most likely a member of the enum
// `other` was meant to be, so it gets the error type without a diagnostic of its own,
// unless it is a field or parameter name a typo away (`nmae`).
Type ExprChecker::CheckOperandAgainst(Expr& e, const Type& other) {
  if (other.is_error() && e.kind == ExprKind::kPath && !TryResolveValue(e)) {
    if (!IsEnumMemberName(e) && !ClosestName(e.path).empty()) ReportUnknownName(e);
    return e.type = Type::Error();
  }
  if (other.kind == TypeKind::kEnum) {
    const bool bare = e.kind == ExprKind::kPath && !TryResolveValue(e);
    const bool str = e.kind == ExprKind::kLiteral && e.literal.kind == Literal::Kind::kString;
    if (bare || str) return ResolveEnumLiteral(e, other.enum_index);
  }
  return Check(e);
}

bool ExprChecker::IsEnumMemberName(const Expr& e) const {
  if (e.kind != ExprKind::kPath) return false;
  return std::any_of(schema_.enums().begin(), schema_.enums().end(),
                     [&](const EnumInfo& info) { return info.Find(e.path) >= 0; });
}

Type ExprChecker::CheckCompare(Expr& e) {
  Expr& lhs = *e.kids[0];
  Expr& rhs = *e.kids[1];
  // Resolve the side that names a value first, so `TENSOR_MATCH == guard_type` works too.
  // When neither does (a misspelt field against an enum member), the left one is the field
  // unless it is an enum member's name: that side alone is reported (`unknown field`), and
  // the other, checked against its error type, is not.
  const auto is_value = [this](Expr& x) {
    return x.kind != ExprKind::kPath || TryResolveValue(x).has_value();
  };
  const bool lhs_first = is_value(lhs) || (!is_value(rhs) && !IsEnumMemberName(lhs));
  Type lt, rt;
  if (lhs_first) {
    lt = Check(lhs);
    rt = CheckOperandAgainst(rhs, lt);
  } else {
    rt = Check(rhs);
    lt = CheckOperandAgainst(lhs, rt);
  }
  if (lt.is_error() || rt.is_error()) return e.type = Type::Bool();
  const bool ordering = e.op >= BinaryOp::kLt && e.op <= BinaryOp::kGe;
  if (lt != rt) {
    Mismatch(e, fmt::format("cannot compare {} with {}", schema_.TypeName(lt), schema_.TypeName(rt)));
  } else if (ordering && lt.kind != TypeKind::kInt) {
    Mismatch(e, fmt::format("`{}` needs int operands, not {}", BinaryOpName(e.op), schema_.TypeName(lt)));
  } else if (lt.kind == TypeKind::kEnumSet) {
    Mismatch(e, "sets cannot be compared; use `contains`");
  }
  return e.type = Type::Bool();
}

Type ExprChecker::CheckIn(Expr& e) {
  const Type lt = Check(*e.kids[0]);
  if (lt.is_error()) return e.type = Type::Bool();
  if (lt.kind == TypeKind::kEnumSet || lt.kind == TypeKind::kBool) {
    Mismatch(*e.kids[0], fmt::format("`in` needs an int, string or enum, not {}", schema_.TypeName(lt)));
    return e.type = Type::Bool();
  }
  for (size_t i = 1; i < e.kids.size(); ++i) {
    Expr& el = *e.kids[i];
    const Type t = CheckOperandAgainst(el, lt);
    if (!t.is_error() && t != lt) {
      Mismatch(el, fmt::format("set element is {}, expected {}", schema_.TypeName(t), schema_.TypeName(lt)));
    } else if (el.kind == ExprKind::kPath && el.resolved.kind != Resolution::Kind::kEnumLiteral &&
               !t.is_error()) {
      Mismatch(el, "set elements must be literals or enum members");
    }
  }
  return e.type = Type::Bool();
}

void ExprChecker::CheckPattern(const Expr& pattern, BinaryOp op) {
  if (pattern.kind != ExprKind::kLiteral) return;  // a parameter: checked when bound
  std::string regex;
  const std::string err = PatternError(pattern.literal.str, op, options_.max_regex_bytes, &regex);
  if (!err.empty()) diags_.Error(codes::kBadRegex, pattern.range, err, PatternHelp(op));
}

Type ExprChecker::CheckStringOp(Expr& e) {
  Expr& lhs = *e.kids[0];
  Expr& rhs = *e.kids[1];
  const Type lt = Check(lhs);
  if (lt.is_error()) return e.type = Type::Bool();
  if (e.op == BinaryOp::kContains && lt.kind == TypeKind::kEnumSet) {
    const Type rt = CheckOperandAgainst(rhs, Type::Enum(lt.enum_index));
    if (!rt.is_error() && rhs.resolved.kind != Resolution::Kind::kEnumLiteral &&
        rhs.resolved.kind != Resolution::Kind::kParam) {
      Mismatch(rhs, "`contains` on a set needs an enum member");
    }
    return e.type = Type::Bool();
  }
  const Type rt = Check(rhs);
  if (rt.is_error()) return e.type = Type::Bool();
  if (lt.kind != TypeKind::kString || rt.kind != TypeKind::kString) {
    Mismatch(e, fmt::format("`{}` needs string operands, not {} and {}", BinaryOpName(e.op),
                            schema_.TypeName(lt), schema_.TypeName(rt)));
    return e.type = Type::Bool();
  }
  if (e.op == BinaryOp::kMatches || e.op == BinaryOp::kGlob) {
    if (rhs.kind == ExprKind::kLiteral || rhs.resolved.kind == Resolution::Kind::kParam) {
      CheckPattern(rhs, e.op);
    } else {
      Mismatch(rhs, fmt::format("the pattern of `{}` must be a string literal or parameter",
                                BinaryOpName(e.op)));
    }
  }
  return e.type = Type::Bool();
}

// A plugin function or filter call. Filter arguments are bound when the policy compiles,
// so they must be literals or parameters of the policy.
Type ExprChecker::CheckCall(Expr& e) {
  const int index = schema_.FindFunction(e.path);
  if (index < 0) {
    for (auto& arg : e.kids) Check(*arg);
    const std::string best = ClosestMatch(e.path, schema_.FunctionNames());
    diags_.Error(codes::kUnknownFunction, e.range, fmt::format("unknown function `{}`", e.path),
                 best.empty() ? "functions come from plugins: load one with --plugin (docs/plugins.md)"
                              : fmt::format("did you mean `{}`?", best));
    return e.type = Type::Error();
  }
  const FunctionInfo& fn = schema_.functions()[index];
  e.resolved = {Resolution::Kind::kFunction, index};
  // A filter's trailing parameters with defaults may be left out.
  size_t required = fn.args.size();
  while (fn.is_filter && required > 0 && fn.arg_defaults[required - 1]) --required;
  if (e.kids.size() < required || e.kids.size() > fn.args.size()) {
    const std::string count = required == fn.args.size() ? std::to_string(required)
                                                         : fmt::format("{} to {}", required, fn.args.size());
    diags_.Error(codes::kBadCall, e.range,
                 fmt::format("`{}` takes {} argument{}, {} given", fn.name, count, count == "1" ? "" : "s",
                             e.kids.size()));
    for (auto& arg : e.kids) Check(*arg);
    return e.type = fn.result;
  }
  for (size_t i = 0; i < e.kids.size(); ++i) {
    Expr& arg = *e.kids[i];
    const Type t = CheckOperandAgainst(arg, fn.args[i]);
    if (t.is_error()) continue;
    if (t != fn.args[i]) {
      diags_.Error(codes::kBadCall, arg.range,
                   fmt::format("argument {} of `{}` must be {}, found {}", i + 1, fn.name,
                               schema_.TypeName(fn.args[i]), schema_.TypeName(t)));
    } else if (fn.is_filter && arg.kind != ExprKind::kLiteral && arg.resolved.kind != Resolution::Kind::kParam) {
      diags_.Error(codes::kBadCall, arg.range,
                   fmt::format("argument {} of filter `{}` must be a literal or a parameter", i + 1, fn.name),
                   "filter parameters are bound when the policy is compiled");
    }
  }
  return e.type = fn.result;
}

Type ExprChecker::CheckBoolOperand(Expr& e) {
  const Type t = Check(e);
  if (!t.is_error() && t.kind != TypeKind::kBool) {
    diags_.Error(codes::kConditionNotBool, e.range,
                 fmt::format("expected a bool condition, found {}", schema_.TypeName(t)));
  }
  return t;
}

Type ExprChecker::Check(Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      switch (e.literal.kind) {
        case Literal::Kind::kString: return e.type = Type::String();
        case Literal::Kind::kInt: return e.type = Type::Int();
        case Literal::Kind::kBool: return e.type = Type::Bool();
      }
      break;
    case ExprKind::kPath: return CheckPathValue(e);
    case ExprKind::kNot: CheckBoolOperand(*e.kids[0]); return e.type = Type::Bool();
    case ExprKind::kAnd:
    case ExprKind::kOr:
      CheckBoolOperand(*e.kids[0]);
      CheckBoolOperand(*e.kids[1]);
      return e.type = Type::Bool();
    case ExprKind::kCompare: return CheckCompare(e);
    case ExprKind::kIn: return CheckIn(e);
    case ExprKind::kStringOp: return CheckStringOp(e);
    case ExprKind::kCall: return CheckCall(e);
  }
  return e.type = Type::Error();
}

bool ExprChecker::CheckLiteral(const Literal& lit, const Type& expected, const SourceRange& where) {
  bool ok = false;
  switch (expected.kind) {
    case TypeKind::kBool: ok = lit.kind == Literal::Kind::kBool; break;
    case TypeKind::kInt: ok = lit.kind == Literal::Kind::kInt; break;
    case TypeKind::kString: ok = lit.kind == Literal::Kind::kString; break;
    case TypeKind::kEnum: {
      const EnumInfo& info = schema_.enums()[expected.enum_index];
      ok = lit.kind == Literal::Kind::kString && (info.open || info.Find(lit.str) >= 0);
      if (ok && info.open) return CheckEnumName(lit.str, info, where);
      break;
    }
    default: break;
  }
  if (ok || expected.is_error()) return ok;
  static constexpr const char* kLiteralKinds[] = {"string", "int", "bool"};
  if (expected.kind == TypeKind::kEnum) {
    // An enum value is written as its member's name in a string (docs/language.md).
    const EnumInfo& info = schema_.enums()[expected.enum_index];
    const std::string example = info.members.empty() ? "NAME" : info.members.front();
    if (lit.kind != Literal::Kind::kString) {
      diags_.Error(codes::kBadParameter, where,
                   fmt::format("expected a {} member's name in a string, found {}", info.name,
                               kLiteralKinds[static_cast<int>(lit.kind)]),
                   fmt::format("write the member as a string, e.g. \"{}\"", example));
      return ok;
    }
    std::string best = ClosestMatch(lit.str, info.members);
    for (const std::string& m : info.members) {  // members are upper case; "local" means LOCAL
      const auto same = [](char a, char b) { return std::toupper(static_cast<unsigned char>(a)) == b; };
      if (std::equal(lit.str.begin(), lit.str.end(), m.begin(), m.end(), same)) best = m;
    }
    diags_.Error(codes::kBadParameter, where,
                 fmt::format("`{}` is not a {} member", ShortDisplay(lit.str), info.name),
                 best.empty() ? fmt::format("see the {} members in docs/schema.md", info.name)
                              : fmt::format("did you mean \"{}\"?", best));
    return ok;
  }
  diags_.Error(codes::kBadParameter, where,
               fmt::format("expected {} value, found {}", WithArticle(schema_.TypeName(expected)),
                           kLiteralKinds[static_cast<int>(lit.kind)]));
  return ok;
}

}  // namespace guardpolicy::checker_internal
