// config_checks.cpp: `config KNOB = VALUE` lines: the knob, its type, its least value, its risks.
#include "config_checks.h"

#include <set>
#include <string>

#include <fmt/format.h>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/printer.h"

namespace guardpolicy::checker_internal {
namespace {

void ReportUnknownKnob(const ConfigSetting& c, const Schema& schema, Diagnostics& diags) {
  std::vector<std::string> names;
  for (const ConfigKnob& k : schema.config()) names.push_back(k.name);
  const std::string best = ClosestMatch(c.knob, names);
  diags.Error(codes::kUnknownConfig, c.range, fmt::format("unknown config knob `{}`", c.knob),
              best.empty() ? "the schema's `config` section lists the knobs"
                           : fmt::format("did you mean `{}`?", best));
}

// GP2010 below the knob's `min`, else GP2021 for each of its risks the value has.
void CheckValue(const ConfigSetting& c, const ConfigKnob& knob, Diagnostics& diags) {
  if (knob.min && c.value.kind == Literal::Kind::kInt && c.value.i < *knob.min) {
    diags.Error(
        codes::kUnknownConfig, c.value.range,
        fmt::format("`config {}` is {}, below its least value {}", c.knob, c.value.i, *knob.min),
        fmt::format("write a value of at least {} (the schema's `min`)", *knob.min));
    return;
  }
  for (const ConfigRisk& risk : knob.risks) {
    if (!risk.Holds(c.value)) continue;
    diags.Warning(codes::kConfigRisk, c.range,
                  fmt::format("`config {} = {}` {}", c.knob, PrintLiteral(c.value), risk.text),
                  risk.help);
  }
}

}  // namespace

void CheckConfigLines(const std::vector<ConfigSetting>& config, const Schema& schema,
                      ExprChecker& exprs, Diagnostics& diags) {
  std::set<std::string> seen;
  for (const ConfigSetting& c : config) {
    const ConfigKnob* knob = schema.FindConfig(c.knob);
    if (knob == nullptr) {
      ReportUnknownKnob(c, schema, diags);
      continue;
    }
    const bool typed = exprs.CheckLiteral(c.value, knob->type, c.value.range);
    if (!seen.insert(c.knob).second) {
      diags.Error(codes::kDuplicateItem, c.range,
                  fmt::format("`config {}` given more than once", c.knob));
    } else if (typed) {
      CheckValue(c, *knob, diags);
    }
  }
}

}  // namespace guardpolicy::checker_internal
