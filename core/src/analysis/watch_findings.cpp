// watch_findings.cpp: GP3012, and the input-guard formulas GP3008 shares.
#include "watch_findings.h"

#include <fmt/format.h>

#include <string>

#include "guardpolicy/diag_codes.h"

namespace guardpolicy::analysis {
namespace {

// "`A`", "`A` and `B`", "`A`, `B` and `C`".
std::string Quoted(const std::vector<std::string_view>& names, std::string_view last_joiner) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? fmt::format(" {} ", last_joiner) : std::string(", ");
    out += fmt::format("`{}`", names[i]);
  }
  return out;
}

// The rule that says what torch does anyway: `guard_type == A`, `guard_type in {A, B, C}`,
// or for more, the sources every ambient guard comes from.
std::string KeepRule(const std::vector<std::string_view>& types) {
  if (types.size() == 1) return fmt::format("keep when guard_type == {}", types.front());
  if (types.size() > 3)
    return R"(keep when source.kind in {"GlobalStateSource", "ShapeEnvSource"})";
  std::string set;
  for (const std::string_view t : types) set += (set.empty() ? "" : ", ") + std::string(t);
  return fmt::format("keep when guard_type in {{{}}}", set);
}

}  // namespace

FormulaPtr InputTensorGuard(Vocabulary& vocab) {
  return And(And(vocab.GuardTypeIs("TENSOR_MATCH"), vocab.GuardSourceIn({"LOCAL"})),
             Not(vocab.BoolField("value.is_parameter")));
}

FormulaPtr InputValueGuard(Vocabulary& vocab) {
  // torch guards a non-tensor, non-module argument and its items with these (guard_source
  // LOCAL, as tensor inputs; the guarded value is there: has_value).
  const FormulaPtr value_guard =
      Or(Or(vocab.GuardTypeIs("CONSTANT_MATCH"), vocab.GuardTypeIs("EQUALS_MATCH")),
         vocab.GuardTypeIs("TYPE_MATCH"));
  return And(And(And(value_guard, vocab.GuardSourceIn({"LOCAL"})), vocab.BoolField("has_value")),
             Not(Or(vocab.BoolField("value.is_tensor"), vocab.BoolField("value.is_module"))));
}

void ReportWatchedAmbient(const SourceRange& site, const std::vector<std::string_view>& types,
                          Diagnostics& diags) {
  if (types.empty()) return;
  diags.Warning(
      codes::kUnwatchableWatch, site,
      fmt::format("`watch` on {} guards is honoured as `keep`: their state is not held in a dict a "
                  "watcher can see",
                  Quoted(types, "and")),
      fmt::format("torch checks {} on every call; say so with `{}` before the watch",
                  types.size() == 1 ? "it" : "them", KeepRule(types)));
}

void ReportWatchedInputs(const SourceRange& site, const std::vector<std::string_view>& types,
                         Diagnostics& diags) {
  if (types.empty()) return;
  diags.Warning(
      codes::kUnwatchableWatch, site,
      fmt::format(
          "`watch` on {} guards on inputs is honoured as `keep`: an input tensor is passed anew on "
          "every call, and its metadata is held in no dict a watcher can see",
          Quoted(types, "or")),
      "torch checks an input tensor's guards on every call; say so with "
      "`keep when guard_source == LOCAL and guard_type == TENSOR_MATCH` before the watch");
}

}  // namespace guardpolicy::analysis
