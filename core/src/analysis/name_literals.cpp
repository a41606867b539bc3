// name_literals.cpp: GP3011, module paths written in `name`'s dotted style.
#include "name_literals.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <string>
#include <string_view>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/literal.h"

namespace guardpolicy::analysis {
namespace {

// `self.A` followed by `.B` or `[N]`, A a plain (not underscore) attribute.
const re2::RE2& ModuleStyle() {
  static const re2::RE2 re(R"(self\.[A-Za-z][A-Za-z0-9_]*(\.|\[[0-9]+\]).*)");
  return re;
}

// Whether a dotted `self.A...` string can only mean a submodule (torch spells it
// `self._modules['A']`): an index or a number as a step (`self.layers[0]`, `self.layers.0.`),
// a prefix ending at a step (`self.fc.`), or a parameter or buffer at the end
// (`self.fc.weight`). An attribute chain (`self.config.return_dict`) is torch's own name when
// `A` is a plain object, so it is left alone.
bool RefersToModule(std::string_view text) {
  static const re2::RE2 re(
      R"(self\.[A-Za-z][A-Za-z0-9_]*(\[[0-9]+\].*|.*\.[0-9]+(\..*)?|.*\.|)"
      R"(.*\.(weight|bias|running_mean|running_var|num_batches_tracked)))");
  return re2::RE2::FullMatch(re2::StringPiece(text.data(), text.size()), re);
}

// `self.fc.weight` -> `fc.weight`, `self.layers[0].attn` -> `layers.0.attn`.
std::string PathSpelling(std::string_view name) {
  std::string out(name.substr(5));  // drop "self."
  static const re2::RE2 index(R"(\[([0-9]+)\])");
  re2::RE2::GlobalReplace(&out, index, R"(.\1)");
  return out;
}

// The literal part of a glob pattern: up to the first `*`, `?` or `[`.
std::string_view GlobPrefix(std::string_view pattern) {
  const size_t cut = pattern.find_first_of("*?[");
  return cut == std::string_view::npos ? pattern : pattern.substr(0, cut);
}

bool IsNameField(const Expr& e) {
  return e.kind == ExprKind::kPath && e.resolved.kind == Resolution::Kind::kField && e.path == "name";
}

// The warning for the string literal `e` compared with `name` by `verb`, if torch cannot
// produce it.
void CheckLiteral(const Expr& e, std::string_view verb, Diagnostics& diags) {
  const Literal& lit = e.literal;
  if (lit.kind != Literal::Kind::kString) return;
  const bool glob = verb == "glob";
  const std::string_view text = glob ? GlobPrefix(lit.str) : std::string_view(lit.str);
  if (text.substr(0, 2) == "L[") {
    diags.Warning(codes::kImpossibleName, e.range, "no guard `name` starts with `L[`: torch strips the local scope",
                  "`L['x']` is named `x`; or compare `path` with `input:x` (docs/schema.md, \"Real names\")");
    return;
  }
  if (!re2::RE2::FullMatch(re2::StringPiece(text.data(), text.size()), ModuleStyle())) return;
  if (!RefersToModule(text)) return;  // `self.config.return_dict`: torch's name when config is no module
  const std::string path = PathSpelling(glob ? std::string_view(lit.str) : text);
  const size_t end = text.find_first_of(".[", 5);
  const std::string_view attr = text.substr(5, end - 5);
  diags.Warning(codes::kImpossibleName, e.range,
                fmt::format("torch 2.13 names a submodule `self._modules['{0}']`: if `{0}` is a module, {1} "
                            "matches none of its guards",
                            attr, QuoteString(lit.str)),
                fmt::format("compare `path`, which spells it as named_modules() and named_parameters() do: "
                            "`path {} {}` (docs/schema.md, \"Real names\")",
                            verb, QuoteString(path)));
}

void Walk(const Expr& e, Diagnostics& diags) {
  if (e.kind == ExprKind::kCompare && (e.op == BinaryOp::kEq || e.op == BinaryOp::kNe) && e.kids.size() == 2) {
    for (int side = 0; side < 2; ++side) {
      if (IsNameField(*e.kids[side]) && e.kids[1 - side]->kind == ExprKind::kLiteral) {
        CheckLiteral(*e.kids[1 - side], e.op == BinaryOp::kEq ? "==" : "!=", diags);
      }
    }
  } else if (e.kind == ExprKind::kIn && !e.kids.empty() && IsNameField(*e.kids[0])) {
    for (size_t k = 1; k < e.kids.size(); ++k) {
      if (e.kids[k]->kind == ExprKind::kLiteral) CheckLiteral(*e.kids[k], "==", diags);
    }
  } else if (e.kind == ExprKind::kStringOp && (e.op == BinaryOp::kStartsWith || e.op == BinaryOp::kGlob) &&
             e.kids.size() == 2 && IsNameField(*e.kids[0]) && e.kids[1]->kind == ExprKind::kLiteral) {
    CheckLiteral(*e.kids[1], e.op == BinaryOp::kGlob ? "glob" : "startswith", diags);
  }
  for (const auto& k : e.kids) Walk(*k, diags);
}

}  // namespace

void CheckNameLiterals(const PolicyDecl& policy, Diagnostics& diags) {
  for (const Item& item : policy.items) {
    if (item.kind == Item::Kind::kRule && item.rule.condition) Walk(*item.rule.condition, diags);
  }
}

}  // namespace guardpolicy::analysis
