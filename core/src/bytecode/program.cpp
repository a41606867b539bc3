// program.cpp: opcode names and regex finalization (RE2 and its prefilter, FilteredRE2).
#include <re2/filtered_re2.h>
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

// The maximal substrings (at least Program::kMinAtomLength bytes, none inside another,
// longest first, at most kMaxRequired) contained in every one of `strings`: a string that
// lacks any of them holds none of `strings`. Several, because the longest is often the
// boilerplate every name has (`_modules['` of `_modules\['(dropout|drop)'\]`) while a
// shorter one (`drop`) rejects most names. Only for a few short atoms (the search is
// polynomial of high degree; a long glob gives atoms of kilobytes).
std::vector<std::string> CommonSubstrings(const std::vector<std::string>& strings) {
  constexpr size_t kMaxAtoms = 16, kMaxAtomBytes = 32, kMaxRequired = 3;
  if (strings.size() < 2 || strings.size() > kMaxAtoms) return {};
  for (const std::string& s : strings) {
    if (s.size() > kMaxAtomBytes) return {};
  }
  const std::string& first = strings.front();
  std::vector<std::string> found;
  for (size_t len = first.size(); len >= Program::kMinAtomLength && found.size() < kMaxRequired; --len) {
    for (size_t i = 0; i + len <= first.size() && found.size() < kMaxRequired; ++i) {
      const std::string_view candidate(first.data() + i, len);
      bool everywhere = true;
      for (const std::string& s : strings) everywhere = everywhere && s.find(candidate) != std::string::npos;
      bool inside_found = false;
      for (const std::string& f : found) inside_found = inside_found || f.find(candidate) != std::string::npos;
      if (everywhere && !inside_found) found.emplace_back(candidate);
    }
  }
  return found;
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
    // RE2's own prefilter: the substrings ("atoms", lower case) of its and/or tree; a
    // string that holds none of them cannot match (vm.cpp, Matches).
    re2::FilteredRE2 filter(kMinAtomLength);
    int id = 0;
    if (filter.Add(pattern, opts, &id) != RE2::NoError) return "invalid pattern `" + pattern + "`";
    RegexFilter f;
    filter.Compile(&f.atoms);
    f.required = CommonSubstrings(f.atoms);
    regex_filters.push_back(std::move(f));
  }
  return {};
}

}  // namespace guardpolicy
