// glob.h: `glob` patterns as RE2 source, with their problems said in glob terms.
//
// The rules are fnmatch's (POSIX, as Python's fnmatch.fnmatchcase reads them): `*` any
// text, `?` one character, `[abc]` one of a class, `[!abc]` one not in it, `a-z` a range
// in a class. A `]` right after `[` or `[!` is a member (`[]]`, `[]abc]`, `[!]]`); a `[`
// with no `]` after it matches itself; every other character (`\` included) is literal.
#pragma once

#include <string>
#include <string_view>

namespace guardpolicy::checker_internal {

struct GlobRegex {
  std::string regex;  // "(?s)^...$" RE2 source; set when `error` is empty
  std::string error;  // what is wrong with the glob, quoting only what the user wrote
};

GlobRegex GlobToRegex(std::string_view glob);

}  // namespace guardpolicy::checker_internal
