// config_checks.h: a policy's own `config` lines against the schema's `config:` section.
#pragma once

#include <vector>

#include "expr_checker.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/runtime_settings.h"
#include "guardpolicy/schema.h"

namespace guardpolicy::checker_internal {

// Each line names a knob of the schema (GP2010, with a did-you-mean) with a value of its type
// and at least its `min` (GP2010), at most once (GP2013); a value with one of the knob's
// `risks` is a warning (GP2021) saying what it costs. Lines a policy inherits through
// `extends` are its base's to check.
void CheckConfigLines(const std::vector<ConfigSetting>& config, const Schema& schema,
                      ExprChecker& exprs, Diagnostics& diags);

}  // namespace guardpolicy::checker_internal
