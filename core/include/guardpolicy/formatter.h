// formatter.h: one canonical layout for policy files (`guardpolicy fmt`).
//
// Two-space indentation, one item per line in source order, one blank line between
// declarations, at most one blank line where the source had any, minimal parentheses,
// canonical literals. Comments are kept: own-line comments before the construct that
// follows them, trailing comments after the line they ended. Formatting is idempotent
// and never changes meaning: the formatted file compiles to the same bytecode.
#pragma once

#include <optional>
#include <string>

#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"
#include "guardpolicy/source.h"

namespace guardpolicy {

struct FormatResult {
  std::optional<std::string> text;  // unset when the source does not parse
  Diagnostics diagnostics;          // the syntax errors, if any
};

FormatResult Format(SourceFilePtr file, const CompileOptions& options = {});

}  // namespace guardpolicy
