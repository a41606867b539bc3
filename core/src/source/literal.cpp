// literal.cpp: string literals back to policy source text.
#include "guardpolicy/literal.h"

namespace guardpolicy {

std::string QuoteString(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace guardpolicy
