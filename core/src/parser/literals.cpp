// literals.cpp: string escapes and integer literals.
#include "literals.h"

#include <charconv>

namespace guardpolicy::parser_internal {

std::optional<std::string> UnescapeString(std::string_view token, size_t* bad_offset) {
  std::string out;
  const std::string_view body = token.size() >= 2 ? token.substr(1, token.size() - 2) : "";
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\') {
      out.push_back(body[i]);
      continue;
    }
    const char next = i + 1 < body.size() ? body[i + 1] : '\0';
    switch (next) {
      case '\\': out.push_back('\\'); break;
      case '"': out.push_back('"'); break;
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      default:
        if (bad_offset) *bad_offset = i + 1;
        return std::nullopt;
    }
    ++i;
  }
  return out;
}

std::optional<int64_t> ParseInt(std::string_view digits, bool negative) {
  uint64_t magnitude = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  constexpr uint64_t kMaxPositive = static_cast<uint64_t>(INT64_MAX);
  if (!negative) {
    if (magnitude > kMaxPositive) return std::nullopt;
    return static_cast<int64_t>(magnitude);
  }
  if (magnitude > kMaxPositive + 1) return std::nullopt;
  return magnitude == kMaxPositive + 1 ? INT64_MIN : -static_cast<int64_t>(magnitude);
}

}  // namespace guardpolicy::parser_internal
