// input_checks.h: refusals before ANTLR runs (size, encoding, nesting depth).
#pragma once

#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"
#include "guardpolicy/source.h"

namespace guardpolicy::parser_internal {

// Appends GP0002/GP0003/GP0004 diagnostics; returns false when the input must not be parsed.
bool CheckInput(const SourceFilePtr& file, const CompileOptions& options, Diagnostics& diags);

}  // namespace guardpolicy::parser_internal
