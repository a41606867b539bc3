// keywords.h: the language's keywords, as the grammar (grammar/GuardPolicy.g4) defines them.
//
// Read from the lexer ANTLR generates from the grammar, so the grammar is the only list:
// the plugin loader (a name spelt like a keyword could never be written in a policy) and
// the Pygments lexer (guardpolicy._core.keywords()) use this one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace guardpolicy {

// Every keyword token of the grammar (`guardpolicy`, `policy`, `keep`, `and`, `true`, ...),
// in token order. Thread-safe.
const std::vector<std::string>& Keywords();

// Whether `word` is one of Keywords().
bool IsKeyword(std::string_view word);

}  // namespace guardpolicy
