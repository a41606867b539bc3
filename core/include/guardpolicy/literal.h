// literal.h: a literal value as written in policy source (`"text"`, `42`, `-1`, `true`).
//
// Below the AST: the schema (plugin filter defaults), parameter bindings and the policy
// metadata hold literals too, and none of them needs the syntax tree.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "guardpolicy/source.h"

namespace guardpolicy {

// A literal as written: "text", 42, -1, true, false.
struct Literal {
  enum class Kind : uint8_t { kString, kInt, kBool };
  Kind kind = Kind::kBool;
  std::string str;
  int64_t i = 0;
  bool b = false;
  SourceRange range;
};

// Bound parameter values by name; each Literal must match the parameter's type.
using ParamValues = std::map<std::string, Literal, std::less<>>;

// The inverse of the parser's string unescaping: quotes and escapes `text` as policy source.
std::string QuoteString(std::string_view text);

}  // namespace guardpolicy
