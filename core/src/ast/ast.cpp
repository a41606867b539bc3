// ast.cpp: names of AST enums and module lookups.
#include "guardpolicy/ast.h"

namespace guardpolicy {

const char* BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kEq: return "==";
    case BinaryOp::kNe: return "!=";
    case BinaryOp::kLt: return "<";
    case BinaryOp::kLe: return "<=";
    case BinaryOp::kGt: return ">";
    case BinaryOp::kGe: return ">=";
    case BinaryOp::kContains: return "contains";
    case BinaryOp::kStartsWith: return "startswith";
    case BinaryOp::kEndsWith: return "endswith";
    case BinaryOp::kMatches: return "matches";
    case BinaryOp::kGlob: return "glob";
  }
  return "?";
}

const PolicyDecl* Module::FindPolicy(std::string_view name) const {
  for (const PolicyDecl& p : policies) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace guardpolicy
