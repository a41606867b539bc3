// program.cpp: opcode names (opcodes.h) and Program::Link: verification, and the regexes
// compiled (RE2 and its prefilter, FilteredRE2).
#include <re2/filtered_re2.h>
#include <re2/re2.h>

#include <cctype>
#include <cstring>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/verifier.h"

namespace guardpolicy {

const char* OpcodeName(Opcode op) {
  const OpcodeInfo* info = FindOpcode(op);
  return info ? info->name : "INVALID";
}

namespace {

// The maximal substrings (at least RegexFilter::kMinAtomLength bytes, none inside another,
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
  for (size_t len = first.size(); len >= RegexFilter::kMinAtomLength && found.size() < kMaxRequired; --len) {
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

const std::vector<Constant>& ProgramImage::FieldArgs(size_t slot) const {
  static const std::vector<Constant> kNone;
  return slot < field_args.size() ? field_args[slot] : kNone;
}

void Program::CompileRegexes() {
  RE2::Options opts;
  opts.set_log_errors(false);
  for (const std::string& pattern : image_.regexes) {
    auto re = std::make_shared<const RE2>(pattern, opts);
    if (!re->ok()) throw LinkError(LinkError::Kind::kBadRegex, "invalid pattern `" + pattern + "`: " + re->error());
    regexes_.push_back(std::move(re));
    // RE2's own prefilter: the substrings ("atoms", lower case) of its and/or tree; a
    // string that holds none of them cannot match (vm.cpp, Matches).
    re2::FilteredRE2 filter(RegexFilter::kMinAtomLength);
    int id = 0;
    if (filter.Add(pattern, opts, &id) != RE2::NoError) {
      throw LinkError(LinkError::Kind::kBadRegex, "invalid pattern `" + pattern + "`");
    }
    RegexFilter f;
    filter.Compile(&f.atoms);
    f.required = CommonSubstrings(f.atoms);
    regex_filters_.push_back(std::move(f));
  }
}

Program Program::Link(ProgramImage image, const Schema& schema) {
  Program p;
  p.image_ = std::move(image);
  const Verified verified = Verify(p.image_);
  if (!verified.ok()) {
    throw LinkError(verified.error->kind == VerifyError::Kind::kStackTooDeep ? LinkError::Kind::kStackTooDeep
                                                                             : LinkError::Kind::kMalformed,
                    verified.error->message);
  }
  p.max_stack_ = verified.max_stack;
  p.Bind(schema);
  p.CompileRegexes();
  return p;
}

}  // namespace guardpolicy
