// parser.h: source text -> Module (ANTLR4 grammar grammar/GuardPolicy.g4).
//
// Every syntax error becomes a GP1xxx diagnostic with its range; the parser recovers and
// reports all of them. Encoding and size limits (GP0002-GP0004) are checked before ANTLR
// runs, so deep nesting or huge inputs cannot exhaust the stack. Thread-safe.
#pragma once

#include <memory>

#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/options.h"

namespace guardpolicy {

struct ParseResult {
  std::unique_ptr<Module> module;  // null only when the input was refused before parsing
  Diagnostics diagnostics;
};

ParseResult Parse(SourceFilePtr file, const CompileOptions& options = {});

}  // namespace guardpolicy
