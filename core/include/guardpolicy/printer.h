// printer.h: canonical source text of expressions and literals.
//
// Used by the formatter (guardpolicy fmt) and as the identity of a test in the analysis.
// Parentheses appear only where precedence needs them: operands, comparisons, `not`,
// `and`, `or` (tightest first).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "guardpolicy/ast.h"

namespace guardpolicy {

std::string PrintLiteral(const Literal& lit);
// The text of the set `{...}` of an `in` expression, or "" for the canonical one-line
// `{a, b}` (the formatter lays out sets with comments one member a line).
using SetPrinter = std::function<std::string(const Expr& in_expr)>;
// `bound` (may be null) replaces parameter names with their bound literal; `sets` (may be
// null) prints the sets of `in` expressions.
std::string PrintExpr(const Expr& e, const std::map<std::string, Literal, std::less<>>* bound = nullptr,
                      const SetPrinter* sets = nullptr);

}  // namespace guardpolicy
