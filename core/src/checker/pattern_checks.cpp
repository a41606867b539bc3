// pattern_checks.cpp: the checks of a pattern or an enum name that the checker (literals as
// written) and the compiler (bound parameter values) share.
#include "guardpolicy/pattern_checks.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include "glob.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/display_text.h"

namespace guardpolicy {

using checker_internal::GlobRegex;
using checker_internal::GlobToRegex;

std::string RegexError(const std::string& pattern, int max_bytes) {
  if (static_cast<int>(pattern.size()) > max_bytes) {
    return fmt::format("pattern is {} bytes, over the limit of {}", pattern.size(), max_bytes);
  }
  RE2::Options opts;
  opts.set_log_errors(false);
  RE2 re(pattern, opts);
  return re.ok() ? std::string() : re.error();
}

std::string PatternError(std::string_view text, BinaryOp op, int max_bytes, std::string* regex) {
  if (op != BinaryOp::kGlob) {
    *regex = std::string(text);
    const std::string err = RegexError(*regex, max_bytes);
    return err.empty() ? err : "invalid pattern: " + err;
  }
  GlobRegex glob = GlobToRegex(text);
  *regex = glob.regex;
  if (!glob.error.empty()) return "invalid glob pattern: " + glob.error;
  if (static_cast<int>(glob.regex.size()) > max_bytes) {
    return fmt::format(
        "glob pattern of {} bytes is too long: it makes a {}-byte regex, over the limit of {}",
        text.size(), glob.regex.size(), max_bytes);
  }
  // The translation only writes valid RE2: a failure here is ours, and the generated regex
  // is not the user's text, so it is not quoted.
  return RegexError(glob.regex, max_bytes).empty() ? std::string() : "invalid glob pattern";
}

const char* PatternHelp(BinaryOp op) {
  return op == BinaryOp::kGlob ? "globs use `*`, `?`, `[abc]`, `[!abc]` and ranges `[a-z]`; a `]` "
                                 "first in a class is a member"
                               : "patterns use RE2 syntax (no backreferences or lookaround)";
}

std::string NearMiss(std::string_view name, const EnumInfo& info) {
  if (!info.open || info.Find(name) >= 0) return {};
  std::string best;
  int best_distance = kNearMissDistance + 1;
  for (const std::string& m : info.members) {
    const int dist = EditDistance(name, m);
    if (dist < best_distance) best_distance = dist, best = m;
  }
  return best;
}

}  // namespace guardpolicy
