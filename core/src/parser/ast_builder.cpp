// ast_builder.cpp: walks the generated parse tree and builds the AST.
#include "ast_builder.h"

#include <fmt/format.h>

#include "guardpolicy/diag_codes.h"
#include "literals.h"

namespace guardpolicy::parser_internal {

using P = gp_antlr::GuardPolicyParser;

OffsetMap::OffsetMap(const std::string& utf8) {
  for (uint32_t i = 0; i < utf8.size(); ++i) {
    if ((static_cast<unsigned char>(utf8[i]) & 0xC0) != 0x80) byte_of_.push_back(i);
  }
  byte_of_.push_back(static_cast<uint32_t>(utf8.size()));
}

uint32_t OffsetMap::ToByte(size_t cp) const {
  return cp < byte_of_.size() ? byte_of_[cp] : byte_of_.back();
}

namespace {

constexpr size_t kNoIndex = static_cast<size_t>(-1);

class Builder {
 public:
  Builder(const SourceFilePtr& file, const OffsetMap& offsets, int max_expr_depth, Diagnostics& diags)
      : file_(file), offsets_(offsets), diags_(diags), max_expr_depth_(max_expr_depth) {}

  std::unique_ptr<Module> BuildFile(P::File_Context* ctx) {
    auto module = std::make_unique<Module>();
    module->file = file_;
    if (ctx == nullptr) return module;
    if (auto* h = ctx->header(); h && h->version) {
      module->version_range = Range(h->version);
      // Out of range: GP1004 already, and -1 keeps the version check quiet.
      module->version = ParseIntToken(h->version, false).value_or(-1);
    }
    for (auto* decl : ctx->declaration()) {
      if (auto* p = decl->policyDecl()) module->policies.push_back(BuildPolicy(p));
      if (auto* t = decl->testDecl()) module->tests.push_back(BuildTest(t));
    }
    for (PolicyDecl& p : module->policies) p.module = module.get();
    return module;
  }

 private:
  SourceRange Range(antlr4::Token* start, antlr4::Token* stop = nullptr) const {
    if (start == nullptr || start->getStartIndex() == kNoIndex) return {file_, 0, 0};
    if (stop == nullptr || stop->getStopIndex() == kNoIndex ||
        stop->getStopIndex() + 1 < start->getStartIndex()) {
      stop = start;
    }
    return {file_, offsets_.ToByte(start->getStartIndex()),
            offsets_.ToByte(stop->getStopIndex() + 1)};
  }
  SourceRange Range(antlr4::ParserRuleContext* ctx) const {
    return ctx ? Range(ctx->getStart(), ctx->getStop()) : SourceRange{file_, 0, 0};
  }


  static std::string Text(antlr4::Token* t) { return t ? t->getText() : std::string(); }

  std::optional<int64_t> ParseIntToken(antlr4::Token* t, bool negative) {
    auto v = ParseInt(Text(t), negative);
    if (!v) diags_.Error(codes::kIntRange, Range(t), "integer literal out of range",
                         "integers are 64-bit signed");
    return v;
  }

  // A string token's text, with GP1003 for an unknown escape (then "").
  std::string Unescape(const std::string& token, const SourceRange& range) {
    size_t bad = 0;
    auto text = UnescapeString(token, &bad);
    if (!text) {
      const uint32_t at = range.begin + static_cast<uint32_t>(bad);
      diags_.Error(codes::kBadEscape, {file_, at, at + 2}, "unknown escape sequence in string",
                   "use \\\\, \\\", \\n, \\t or \\r");
    }
    return text.value_or("");
  }

  static Decision BuildDecision(P::DecisionContext* ctx) {
    if (ctx && ctx->DROP()) return Decision::kDrop;
    if (ctx && ctx->WATCH()) return Decision::kWatch;
    return Decision::kKeep;
  }

  Literal BuildLiteral(P::LiteralContext* ctx) {
    Literal lit;
    lit.range = Range(ctx);
    if (auto* s = dynamic_cast<P::StringLiteralContext*>(ctx)) {
      lit.kind = Literal::Kind::kString;
      lit.str = Unescape(s->STRING() ? Text(s->STRING()->getSymbol()) : "\"\"", lit.range);
    } else if (auto* i = dynamic_cast<P::IntLiteralContext*>(ctx)) {
      lit.kind = Literal::Kind::kInt;
      // After a syntax error the INT token may be missing (`-` alone): already reported.
      if (i->INT() != nullptr) lit.i = ParseIntToken(i->INT()->getSymbol(), i->MINUS() != nullptr).value_or(0);
    } else if (auto* b = dynamic_cast<P::BoolLiteralContext*>(ctx)) {
      lit.kind = Literal::Kind::kBool;
      lit.b = b->TRUE() != nullptr;
    }
    return lit;
  }

  std::string BuildPath(P::FieldPathContext* ctx) {
    std::string path;
    if (ctx == nullptr) return path;
    for (auto* id : ctx->IDENT()) {
      if (!path.empty()) path += '.';
      path += id->getText();
    }
    return path;
  }

  ExprPtr Node(ExprKind kind, antlr4::ParserRuleContext* ctx) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->range = Range(ctx);
    return e;
  }

  // Builds one condition; past max_expr_depth it reports GP0003 once and stops descending,
  // so no later stage ever recurses deeper than the limit.
  ExprPtr BuildExpr(P::ExprContext* ctx) {
    if (ctx == nullptr) return Node(ExprKind::kLiteral, nullptr);
    if (expr_depth_ >= max_expr_depth_) {
      if (!depth_reported_) {
        diags_.Error(codes::kNestingTooDeep, Range(ctx),
                     fmt::format("condition nested deeper than {} levels", max_expr_depth_),
                     "split it into several rules (the first matching rule decides)");
        depth_reported_ = true;
      }
      return Node(ExprKind::kLiteral, ctx);
    }
    ++expr_depth_;
    ExprPtr e = BuildExprAt(ctx);
    --expr_depth_;
    return e;
  }

  ExprPtr BuildExprAt(P::ExprContext* ctx) {
    if (auto* c = dynamic_cast<P::ParenExprContext*>(ctx)) {
      auto inner = BuildExpr(c->expr());
      inner->range = Range(c);
      return inner;
    }
    if (auto* c = dynamic_cast<P::LiteralExprContext*>(ctx)) {
      auto e = Node(ExprKind::kLiteral, c);
      e->literal = BuildLiteral(c->literal());
      return e;
    }
    if (auto* c = dynamic_cast<P::PathExprContext*>(ctx)) {
      auto e = Node(ExprKind::kPath, c);
      e->path = BuildPath(c->fieldPath());
      return e;
    }
    if (auto* c = dynamic_cast<P::CallExprContext*>(ctx)) {
      auto e = Node(ExprKind::kCall, c);
      e->path = BuildPath(c->callee);
      for (P::ExprContext* arg : c->expr()) e->kids.push_back(BuildExpr(arg));
      return e;
    }
    if (auto* c = dynamic_cast<P::NotExprContext*>(ctx)) {
      auto e = Node(ExprKind::kNot, c);
      e->kids.push_back(BuildExpr(c->expr()));
      return e;
    }
    if (auto* c = dynamic_cast<P::CompareExprContext*>(ctx)) return BuildBinary(c, c->lhs, c->rhs, c->op);
    if (auto* c = dynamic_cast<P::StringOpExprContext*>(ctx)) return BuildBinary(c, c->lhs, c->rhs, c->op);
    if (auto* c = dynamic_cast<P::AndExprContext*>(ctx)) return BuildLogic(ExprKind::kAnd, c, c->lhs, c->rhs);
    if (auto* c = dynamic_cast<P::OrExprContext*>(ctx)) return BuildLogic(ExprKind::kOr, c, c->lhs, c->rhs);
    if (auto* c = dynamic_cast<P::InExprContext*>(ctx)) return BuildIn(c);
    return Node(ExprKind::kLiteral, ctx);
  }

  static BinaryOp OpFromToken(antlr4::Token* op) {
    switch (op ? op->getType() : static_cast<size_t>(P::EQ)) {
      case P::NE: return BinaryOp::kNe;
      case P::LT: return BinaryOp::kLt;
      case P::LE: return BinaryOp::kLe;
      case P::GT: return BinaryOp::kGt;
      case P::GE: return BinaryOp::kGe;
      case P::CONTAINS: return BinaryOp::kContains;
      case P::STARTSWITH: return BinaryOp::kStartsWith;
      case P::ENDSWITH: return BinaryOp::kEndsWith;
      case P::MATCHES: return BinaryOp::kMatches;
      case P::GLOB: return BinaryOp::kGlob;
      default: return BinaryOp::kEq;
    }
  }

  ExprPtr BuildBinary(P::ExprContext* c, P::ExprContext* lhs, P::ExprContext* rhs,
                      antlr4::Token* op) {
    const BinaryOp bop = OpFromToken(op);
    const bool is_compare = bop <= BinaryOp::kGe;
    auto e = Node(is_compare ? ExprKind::kCompare : ExprKind::kStringOp, c);
    e->op = bop;
    e->kids.push_back(BuildExpr(lhs));
    e->kids.push_back(BuildExpr(rhs));
    return e;
  }

  ExprPtr BuildLogic(ExprKind kind, P::ExprContext* c, P::ExprContext* lhs, P::ExprContext* rhs) {
    auto e = Node(kind, c);
    e->kids.push_back(BuildExpr(lhs));
    e->kids.push_back(BuildExpr(rhs));
    return e;
  }

  ExprPtr BuildIn(P::InExprContext* c) {
    auto e = Node(ExprKind::kIn, c);
    e->negated = c->NOT() != nullptr;
    e->kids.push_back(BuildExpr(c->lhs));
    if (c->set == nullptr) return e;
    for (auto* el : c->set->setElement()) {
      if (auto* lit = el->literal()) {
        auto k = Node(ExprKind::kLiteral, el);
        k->literal = BuildLiteral(lit);
        e->kids.push_back(std::move(k));
      } else {
        auto k = Node(ExprKind::kPath, el);
        k->path = Text(el->IDENT() ? el->IDENT()->getSymbol() : nullptr);
        e->kids.push_back(std::move(k));
      }
    }
    return e;
  }

  Param BuildParam(P::ParamContext* ctx) {
    Param p;
    p.name = Text(ctx->name);
    p.type_name = Text(ctx->type);
    p.range = Range(ctx);
    if (auto* lit = ctx->literal()) p.default_value = BuildLiteral(lit);
    return p;
  }

  // A `use` item, or an `extends` clause (a `use` of the base): `ctx` spans it.
  Use BuildUse(antlr4::ParserRuleContext* ctx, P::QualifiedNameContext* target,
               P::ArgListContext* args) {
    Use u;
    u.range = Range(ctx);
    if (target) {
      for (auto* id : target->IDENT()) {
        if (!u.target.empty()) u.target += '.';
        u.target += id->getText();
      }
    }
    if (args) {
      for (auto* a : args->arg()) u.args.push_back({Text(a->name), BuildLiteral(a->literal()), Range(a)});
    }
    return u;
  }

  void DuplicateItem(const SourceRange& range, const char* what) {
    diags_.Error(codes::kDuplicateItem, range, fmt::format("`{}` given more than once", what),
                 "keep only one");
  }

  void BuildItem(PolicyDecl& policy, P::PolicyItemContext* ctx) {
    if (auto* doc = dynamic_cast<P::DocItemContext*>(ctx)) {
      if (policy.doc) DuplicateItem(Range(doc), "doc");
      policy.doc_range = Range(doc);
      if (doc->STRING() != nullptr) {
        Literal text;
        text.range = Range(doc->STRING()->getSymbol());
        policy.doc = Unescape(Text(doc->STRING()->getSymbol()), text.range);
      }
    } else if (auto* rule = dynamic_cast<P::RuleItemContext*>(ctx)) {
      Item item;
      item.rule = {BuildDecision(rule->decision()), BuildExpr(rule->expr()), Range(rule)};
      policy.items.push_back(std::move(item));
    } else if (auto* dflt = dynamic_cast<P::DefaultItemContext*>(ctx)) {
      if (policy.default_decision) DuplicateItem(Range(dflt), "default");
      policy.default_decision = BuildDecision(dflt->decision());
      policy.default_range = Range(dflt);
    } else if (auto* use = dynamic_cast<P::UseItemContext*>(ctx)) {
      Item item;
      item.kind = Item::Kind::kUse;
      item.use = BuildUse(use, use->target, use->argList());
      policy.items.push_back(std::move(item));
    } else if (auto* config = dynamic_cast<P::ConfigItemContext*>(ctx)) {
      policy.runtime.config.push_back(
          {Text(config->knob), BuildLiteral(config->literal()), Range(config)});
    } else {
      BuildRuntimeLine(policy.runtime, ctx);
    }
  }

  // The runtime lines but `config` (runtime_settings.h); each at most once.
  void BuildRuntimeLine(RuntimeSettings& rt, P::PolicyItemContext* ctx) {
    if (auto* stance = dynamic_cast<P::StanceItemContext*>(ctx)) {
      if (rt.stance) DuplicateItem(Range(stance), "stance");
      rt.stance = StanceSetting{Text(stance->stanceName),
                                ParseIntToken(stance->calls, false).value_or(0), Range(stance)};
    } else if (auto* verify = dynamic_cast<P::VerifyItemContext*>(ctx)) {
      if (rt.verify) DuplicateItem(Range(verify), "verify");
      if (verify->exception) return;  // a syntax error, reported by the parser
      rt.verify = VerifySetting{ParseIntToken(verify->calls, false).value_or(0), Range(verify)};
    } else if (auto* violation = dynamic_cast<P::OnViolationItemContext*>(ctx)) {
      if (rt.on_violation) DuplicateItem(Range(violation), "on_violation");
      if (violation->exception) return;
      rt.on_violation = OnViolationSetting{Text(violation->action), Range(violation)};
    } else if (auto* recompile = dynamic_cast<P::OnRecompileItemContext*>(ctx)) {
      if (rt.on_recompile) DuplicateItem(Range(recompile), "on_recompile");
      if (recompile->exception) return;
      rt.on_recompile = OnRecompileSetting{Text(recompile->action), Range(recompile)};
    } else if (auto* dispatch = dynamic_cast<P::DispatchItemContext*>(ctx)) {
      if (rt.dispatch) DuplicateItem(Range(dispatch), "dispatch");
      if (dispatch->exception) return;
      rt.dispatch = DispatchSetting{Text(dispatch->dispatchMode), Range(dispatch)};
    } else if (auto* on_error = dynamic_cast<P::OnErrorItemContext*>(ctx)) {
      BuildOnError(rt, on_error);
    }
  }

  void BuildOnError(RuntimeSettings& rt, P::OnErrorItemContext* c) {
    if (rt.on_error) DuplicateItem(Range(c), "on_error");
    if (auto* d = c->decision()) {
      const Decision decision = BuildDecision(d);
      if (decision == Decision::kWatch) {  // an unreadable entry has no state to watch
        diags_.Error(
            codes::kUnknownOnError, Range(d), "unknown on_error action `watch`",
            "an entry that cannot be read has no state to watch; use `keep`, `drop` or `raise`");
        return;
      }
      rt.on_error = OnErrorSetting{decision == Decision::kDrop ? OnError::kDrop : OnError::kKeep,
                                   Range(d), Range(c)};
      return;
    }
    // A missing action is a syntax error already reported by the parser.
    if (c->action == nullptr || c->action->getStartIndex() == kNoIndex || c->exception) return;
    const std::string action = Text(c->action);
    if (action == "raise") {
      rt.on_error = OnErrorSetting{OnError::kRaise, Range(c->action), Range(c)};
    } else {
      diags_.Error(codes::kUnknownOnError, Range(c->action),
                   fmt::format("unknown on_error action `{}`", action),
                   "use `keep`, `drop` or `raise`");
    }
  }

  PolicyDecl BuildPolicy(P::PolicyDeclContext* ctx) {
    PolicyDecl p;
    p.name = Text(ctx->name);
    p.is_unsafe = ctx->UNSAFE() != nullptr;
    p.range = Range(ctx);
    p.name_range = Range(ctx->name);
    if (auto* params = ctx->paramList()) {
      for (auto* param : params->param()) p.params.push_back(BuildParam(param));
    }
    if (auto* base = ctx->extendsClause()) p.extends = BuildUse(base, base->base, base->argList());
    for (auto* item : ctx->policyItem()) BuildItem(p, item);
    return p;
  }

  TestDecl BuildTest(P::TestDeclContext* ctx) {
    TestDecl t;
    t.target = Text(ctx->target);
    t.range = Range(ctx);
    for (auto* ex : ctx->expectation()) {
      Expectation e;
      e.decision = BuildDecision(ex->decision());
      e.range = Range(ex);
      for (auto* f : ex->fieldInit()) {
        e.fields.push_back({BuildPath(f->path), BuildLiteral(f->value), Range(f)});
      }
      t.expectations.push_back(std::move(e));
    }
    return t;
  }

  const SourceFilePtr& file_;
  const OffsetMap& offsets_;
  Diagnostics& diags_;
  int max_expr_depth_;
  int expr_depth_ = 0;
  bool depth_reported_ = false;
};

}  // namespace

std::unique_ptr<Module> BuildModule(P::File_Context* tree, const SourceFilePtr& file,
                                    const OffsetMap& offsets, int max_expr_depth, Diagnostics& diags) {
  return Builder(file, offsets, max_expr_depth, diags).BuildFile(tree);
}

}  // namespace guardpolicy::parser_internal
