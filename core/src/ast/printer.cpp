// printer.cpp: expressions back to canonical source text.
#include "guardpolicy/printer.h"

namespace guardpolicy {
namespace {

// Binding strength: higher binds tighter (see grammar/GuardPolicy.g4).
int Precedence(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kOr: return 1;
    case ExprKind::kAnd: return 2;
    case ExprKind::kNot: return 3;
    case ExprKind::kCompare:
    case ExprKind::kIn:
    case ExprKind::kStringOp: return 4;
    default: return 5;
  }
}

class Printer {
 public:
  Printer(const std::map<std::string, Literal, std::less<>>* bound, const SetPrinter* sets)
      : bound_(bound), sets_(sets) {}

  std::string Print(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return PrintLiteral(e.literal);
      case ExprKind::kPath: return PathText(e);
      case ExprKind::kCall: {
        std::string out = e.path + "(";
        for (size_t i = 0; i < e.kids.size(); ++i) out += (i > 0 ? ", " : "") + Print(*e.kids[i]);
        return out + ")";
      }
      case ExprKind::kNot: return "not " + Operand(*e.kids[0], 3, false);
      case ExprKind::kAnd: return Operand(*e.kids[0], 2, false) + " and " + Operand(*e.kids[1], 2, true);
      case ExprKind::kOr: return Operand(*e.kids[0], 1, false) + " or " + Operand(*e.kids[1], 1, true);
      case ExprKind::kCompare:
      case ExprKind::kStringOp:
        return Operand(*e.kids[0], 4, true) + " " + BinaryOpName(e.op) + " " + Operand(*e.kids[1], 4, true);
      case ExprKind::kIn: {
        const std::string head = Operand(*e.kids[0], 4, true) + (e.negated ? " not in " : " in ");
        if (std::string set = sets_ ? (*sets_)(e) : ""; !set.empty()) return head + set;
        std::string out = head + "{";
        for (size_t i = 1; i < e.kids.size(); ++i) out += (i > 1 ? ", " : "") + Print(*e.kids[i]);
        return out + "}";
      }
    }
    return "?";
  }

 private:
  std::string PathText(const Expr& e) const {
    if (bound_ && e.resolved.kind == Resolution::Kind::kParam) {
      auto it = bound_->find(e.path);
      if (it != bound_->end()) return PrintLiteral(it->second);
    }
    return e.path;
  }

  // Parenthesizes `e` when it binds looser than its context `prec` (or equally, on the
  // right of a left-associative operator, or for nested comparisons).
  std::string Operand(const Expr& e, int prec, bool right) {
    const int p = Precedence(e);
    const bool paren = p < prec || (p == prec && (right || prec == 4));
    const std::string text = Print(e);
    return paren ? "(" + text + ")" : text;
  }

  const std::map<std::string, Literal, std::less<>>* bound_;
  const SetPrinter* sets_;
};

}  // namespace

std::string PrintLiteral(const Literal& lit) {
  switch (lit.kind) {
    case Literal::Kind::kString: return QuoteString(lit.str);
    case Literal::Kind::kInt: return std::to_string(lit.i);
    case Literal::Kind::kBool: return lit.b ? "true" : "false";
  }
  return "?";
}

std::string PrintExpr(const Expr& e, const std::map<std::string, Literal, std::less<>>* bound,
                      const SetPrinter* sets) {
  return Printer(bound, sets).Print(e);
}

}  // namespace guardpolicy
