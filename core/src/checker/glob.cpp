// glob.cpp: glob -> RE2 translation (see glob.h for the rules).
#include "glob.h"

#include <vector>

#include <fmt/format.h>
#include <re2/re2.h>

#include "guardpolicy/display_text.h"
#include "guardpolicy/source.h"

namespace guardpolicy::checker_internal {
namespace {

// The characters of `s` (UTF-8 sequences kept whole; a malformed byte is one character).
std::vector<std::string_view> Chars(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::max<size_t>(1, Utf8SequenceLength(s, i));
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// One class member as RE2 class syntax.
std::string ClassChar(std::string_view c) {
  std::string out;
  if (c.size() == 1 && std::string_view("\\]^-[").find(c[0]) != std::string_view::npos) out += '\\';
  out += c;
  return out;
}

// The members of a class (between `[` or `[!` and its `]`) as the inside of an RE2 class.
std::string ClassBody(const std::vector<std::string_view>& members, std::string_view written, std::string& error) {
  std::string body;
  for (size_t k = 0; k < members.size();) {
    if (k + 2 < members.size() && members[k + 1] == "-") {
      if (CodePointOf(members[k]) > CodePointOf(members[k + 2])) {
        error = fmt::format("the range `{}-{}` in `{}` is reversed, so it matches nothing", DisplayChar(members[k]),
                            DisplayChar(members[k + 2]), ShortDisplay(written));
      }
      body += ClassChar(members[k]) + "-" + ClassChar(members[k + 2]);
      k += 3;
    } else {
      body += ClassChar(members[k++]);
    }
  }
  return body;
}

}  // namespace

GlobRegex GlobToRegex(std::string_view glob) {
  const std::vector<std::string_view> cs = Chars(glob);
  GlobRegex out{"(?s)^", ""};  // (?s): `*` and `?` match a newline too, as in fnmatch
  for (size_t i = 0; i < cs.size(); ++i) {
    if (cs[i] == "*") {
      out.regex += ".*";
    } else if (cs[i] == "?") {
      out.regex += '.';
    } else if (cs[i] == "[") {
      size_t j = i + 1;
      const bool negated = j < cs.size() && cs[j] == "!";
      if (negated) ++j;
      const size_t first = j;
      if (j < cs.size() && cs[j] == "]") ++j;  // a `]` first is a member
      while (j < cs.size() && cs[j] != "]") ++j;
      if (j == cs.size()) {  // no closing `]`: the `[` is literal
        out.regex += "\\[";
        continue;
      }
      const std::vector<std::string_view> members(cs.begin() + first, cs.begin() + j);
      const size_t begin = static_cast<size_t>(cs[i].data() - glob.data());
      const std::string_view written = glob.substr(begin, static_cast<size_t>(cs[j].data() - glob.data()) + 1 - begin);
      out.regex += std::string("[") + (negated ? "^" : "") + ClassBody(members, written, out.error) + "]";
      i = j;
    } else {
      out.regex += RE2::QuoteMeta(cs[i]);
    }
  }
  out.regex += '$';
  if (!out.error.empty()) out.regex.clear();
  return out;
}

}  // namespace guardpolicy::checker_internal
