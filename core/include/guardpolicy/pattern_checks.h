// pattern_checks.h: the checks of a `matches`/`glob` pattern and of an open enum's member name,
// shared by the checker (literals as written) and the compiler (bound parameter values).
// Defined in core/src/checker/pattern_checks.cpp.
#pragma once

#include <string>
#include <string_view>

#include "guardpolicy/ast.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// Names of an open enum (GuardType) this close to a member are taken for a misspelling.
inline constexpr int kNearMissDistance = 2;
// The member of open enum `info` within kNearMissDistance of `name`, which is not a member;
// "" when there is none (or `info` is closed).
std::string NearMiss(std::string_view name, const EnumInfo& info);

// "" when `pattern` is a valid RE2 pattern within `max_bytes`, else RE2's message.
std::string RegexError(const std::string& pattern, int max_bytes);
// The RE2 source of a `matches` (`op` kMatches) or `glob` pattern in `*regex`, and "" or the
// GP2009 message (a glob's problem in glob terms: the generated regex is never quoted).
// Used by the checker (literal patterns) and the compiler (bound parameters).
std::string PatternError(std::string_view text, BinaryOp op, int max_bytes, std::string* regex);
// The GP2009 help for `op`.
const char* PatternHelp(BinaryOp op);

}  // namespace guardpolicy
