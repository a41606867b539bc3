// printer.h: canonical source text of expressions and literals.
//
// Used by the formatter (guardpolicy fmt) and as the identity of a test in the analysis.
// Parentheses appear only where precedence needs them: operands, comparisons, `not`,
// `and`, `or` (tightest first).
#pragma once

#include <map>
#include <string>

#include "guardpolicy/ast.h"

namespace guardpolicy {

std::string PrintLiteral(const Literal& lit);
// `bound` (may be null) replaces parameter names with their bound literal.
std::string PrintExpr(const Expr& e, const std::map<std::string, Literal, std::less<>>* bound = nullptr);

}  // namespace guardpolicy
