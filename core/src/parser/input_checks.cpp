// input_checks.cpp: size, UTF-8 and nesting-depth checks on raw policy text.
#include "input_checks.h"

#include <cctype>

#include <fmt/format.h>

#include "guardpolicy/diag_codes.h"

namespace guardpolicy::parser_internal {
namespace {

bool CheckEncoding(const SourceFilePtr& file, Diagnostics& diags) {
  const std::string& s = file->text();
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '\0') {
      diags.Error(codes::kBadEncoding, {file, uint32_t(i), uint32_t(i + 1)},
                  "source contains a NUL byte");
      return false;
    }
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      diags.Error(codes::kBadEncoding, {file, uint32_t(i), uint32_t(i + 1)},
                  fmt::format("invalid UTF-8 byte 0x{:02x}", static_cast<unsigned char>(s[i])),
                  "policy files must be UTF-8");
      return false;
    }
    i += n;
  }
  return true;
}

// Depth of ( ) and { } outside strings and comments, and runs of `not` (each nests the
// parser once more); reports the first one too deep.
bool CheckNesting(const SourceFilePtr& file, int max_depth, Diagnostics& diags) {
  const std::string& s = file->text();
  int depth = 0;
  int nots = 0;  // consecutive `not` keywords (with only spaces and parentheses between)
  auto is_word = [&](size_t k) { return k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_'); };
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == 'n' && s.compare(i, 3, "not") == 0 && !is_word(i + 3) && (i == 0 || !is_word(i - 1))) {
      if (++nots + depth > max_depth * 4) {
        diags.Error(codes::kNestingTooDeep, {file, uint32_t(i), uint32_t(i + 3)},
                    fmt::format("more than {} nested `not`", max_depth * 4), "simplify the condition");
        return false;
      }
      i += 2;
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '(') nots = 0;
    if (c == '#') {  // comments and strings end at `\r` or `\n`, as the lexer's do
      while (i < s.size() && s[i] != '\n' && s[i] != '\r') ++i;
    } else if (c == '"') {
      for (++i; i < s.size() && s[i] != '"' && s[i] != '\n' && s[i] != '\r'; ++i) {
        if (s[i] == '\\') ++i;
      }
    } else if (c == '(' || c == '{') {
      if (++depth > max_depth) {
        diags.Error(codes::kNestingTooDeep, {file, uint32_t(i), uint32_t(i + 1)},
                    fmt::format("nesting deeper than {} levels", max_depth),
                    "split the condition into several rules");
        return false;
      }
    } else if ((c == ')' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

}  // namespace

bool CheckInput(const SourceFilePtr& file, const CompileOptions& options, Diagnostics& diags) {
  if (file->text().size() > options.max_source_bytes) {
    diags.Error(codes::kSourceTooLarge, {file, 0, 0},
                fmt::format("source is {} bytes, over the limit of {}", file->text().size(),
                            options.max_source_bytes));
    return false;
  }
  return CheckEncoding(file, diags) && CheckNesting(file, options.max_depth, diags);
}

}  // namespace guardpolicy::parser_internal
