// expr_checker.h: types and name resolution of one condition.
#pragma once

#include <optional>

#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"
#include "guardpolicy/pattern_checks.h"
#include "guardpolicy/schema.h"

namespace guardpolicy::checker_internal {

class ExprChecker {
 public:
  ExprChecker(const Schema& schema, const PolicyDecl& policy, const CompileOptions& options,
              Diagnostics& diags)
      : schema_(schema), policy_(policy), options_(options), diags_(diags) {}

  // Checks `e` and its children; returns its type (Error after a reported problem).
  Type Check(Expr& e);
  // Checks a literal used where `expected` is needed (parameter defaults, config, args).
  bool CheckLiteral(const Literal& lit, const Type& expected, const SourceRange& where);

 private:
  Type CheckPathValue(Expr& e);
  std::optional<Type> TryResolveValue(Expr& e);
  // A member name of `info` written at `where`; false (an error reported) when refused.
  bool CheckEnumName(std::string_view name, const EnumInfo& info, const SourceRange& where);
  Type ResolveEnumLiteral(Expr& e, int enum_index);
  Type CheckOperandAgainst(Expr& e, const Type& other);
  // Whether `e` is a bare name that some schema enum has as a member.
  bool IsEnumMemberName(const Expr& e) const;
  Type CheckCompare(Expr& e);
  Type CheckIn(Expr& e);
  Type CheckStringOp(Expr& e);
  Type CheckBoolOperand(Expr& e);
  Type CheckCall(Expr& e);
  void CheckPattern(const Expr& pattern, BinaryOp op);
  // The field or parameter name closest to `name` ("" when none is a typo away).
  std::string ClosestName(const std::string& name) const;
  void ReportUnknownName(const Expr& e);
  void Mismatch(const Expr& e, const std::string& what);

  const Schema& schema_;
  const PolicyDecl& policy_;
  const CompileOptions& options_;
  Diagnostics& diags_;
};

}  // namespace guardpolicy::checker_internal
