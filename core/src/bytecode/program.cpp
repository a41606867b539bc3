// program.cpp: opcode names and regex finalization.
#include <re2/re2.h>

#include <cctype>
#include <cstring>

#include "guardpolicy/bytecode.h"

namespace guardpolicy {

const char* OpcodeName(Opcode op) {
  static constexpr const char* kNames[] = {
      "LOAD_FIELD", "PUSH_CONST", "NOT",       "EQ_BOOL",     "NE_BOOL",   "EQ_INT",
      "NE_INT",     "LT_INT",     "LE_INT",    "GT_INT",      "GE_INT",    "EQ_STR",
      "NE_STR",     "EQ_ENUM",    "NE_ENUM",   "IN_SET",      "SET_HAS",   "CONTAINS",
      "STARTSWITH", "ENDSWITH",   "MATCHES",   "JUMP",        "JUMP_IF_FALSE",
      "JUMP_IF_TRUE", "DECIDE", "NOP", "BRANCH_FIELD", "BRANCH_COMPARE", "BRANCH_IN_SET",
      "BRANCH_MATCHES", "DISPATCH", "CALL"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Opcode::kCount_));
  const auto i = static_cast<size_t>(op);
  return i < static_cast<size_t>(Opcode::kCount_) ? kNames[i] : "INVALID";
}

namespace {

// Index just past the character class that opens at pattern[i] ('['), or npos. Handles a
// leading '^', a leading ']' (a literal), and backslash escapes inside the class.
size_t SkipClass(const std::string& pattern, size_t i) {
  size_t k = i + 1;
  if (k < pattern.size() && pattern[k] == '^') ++k;
  if (k < pattern.size() && pattern[k] == ']') ++k;
  for (; k < pattern.size(); ++k) {
    if (pattern[k] == '\\') {
      ++k;
    } else if (pattern[k] == '[' && k + 1 < pattern.size() && pattern[k + 1] == ':') {
      const size_t close = pattern.find(":]", k + 2);  // [:alpha:]
      if (close == std::string::npos) return std::string::npos;
      k = close + 1;
    } else if (pattern[k] == ']') {
      return k + 1;
    }
  }
  return std::string::npos;
}

// The longest run of literal characters at the top level of `pattern` (outside groups,
// classes, repetition counts and alternation, not under a quantifier), which every match
// must contain. Conservative: anything it does not understand ends the run or gives up;
// "" means no filter. The differential tests compare it against RE2 itself.
Program::RegexFilter RequiredLiteral(const std::string& pattern) {
  Program::RegexFilter best;
  // Flags such as (?i), escapes such as \x41 or \d, and alternation outside groups: no claim.
  if (pattern.find("(?") != std::string::npos) return best;
  int level = 0;
  for (size_t k = 0; k < pattern.size(); ++k) {
    const char ch = pattern[k];
    if (ch == '\\') {
      if (k + 1 < pattern.size() && std::isalnum(static_cast<unsigned char>(pattern[k + 1]))) return best;
      ++k;
    } else if (ch == '[') {
      const size_t end = SkipClass(pattern, k);
      if (end == std::string::npos) return best;
      k = end - 1;
    } else if (ch == '(') {
      ++level;
    } else if (ch == ')') {
      --level;
    } else if (ch == '|' && level == 0) {
      return best;
    }
  }
  std::string run;
  bool run_anchored = !pattern.empty() && pattern[0] == '^';
  auto flush = [&] {
    if (run.size() > best.literal.size()) best = {run, run_anchored};
    run.clear();
    run_anchored = false;
  };
  size_t i = run_anchored ? 1 : 0;
  int depth = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    std::string lit;
    size_t next = i + 1;
    if (c == '\\' && i + 1 < pattern.size()) {
      lit = pattern.substr(i + 1, 1);  // an escaped punctuation character (letters gave up above)
      next = i + 2;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_'-/ :=<>,\"@!%&~`;#", c) != nullptr) {
      lit = std::string(1, c);
    }
    if (c == '(') ++depth;
    if (c == ')') --depth;
    const bool quantified = next < pattern.size() && std::strchr("?*+{", pattern[next]) != nullptr;
    if (lit.empty() || depth > 0 || quantified) {
      flush();
      if (c == '[') {
        next = SkipClass(pattern, i);
        if (next == std::string::npos) return {};
      } else if (c == '{') {  // a repetition count: {2}, {2,}, {2,8}
        next = pattern.find('}', i + 1);
        if (next == std::string::npos) return {};
        ++next;
      }
    } else {
      run += lit;
    }
    i = next;
  }
  flush();
  return best;
}

}  // namespace

std::string Program::Finalize() {
  compiled_regexes.clear();
  regex_filters.clear();
  RE2::Options opts;
  opts.set_log_errors(false);
  for (const std::string& pattern : regexes) {
    auto re = std::make_shared<const RE2>(pattern, opts);
    if (!re->ok()) return "invalid pattern `" + pattern + "`: " + re->error();
    compiled_regexes.push_back(std::move(re));
    regex_filters.push_back(RequiredLiteral(pattern));
  }
  return {};
}

}  // namespace guardpolicy
