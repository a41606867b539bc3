// literals.h: decoding literal token text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace guardpolicy::parser_internal {

// Decodes a quoted string token ("a\"b") with escapes \\ \" \n \t \r (the inverse of
// QuoteString, literal.h). On an unknown escape returns nullopt and sets *bad_offset to the
// backslash's byte offset within `token`.
std::optional<std::string> UnescapeString(std::string_view token, size_t* bad_offset);

// Parses a decimal integer (optionally negated); nullopt when out of int64 range.
std::optional<int64_t> ParseInt(std::string_view digits, bool negative);

}  // namespace guardpolicy::parser_internal
