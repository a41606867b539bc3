// glob_test.cpp: `glob` matches as fnmatch(3) does, and its errors speak of the glob.
#include <fnmatch.h>

#include <clocale>

#include <gtest/gtest.h>

#include "guardpolicy/diag_codes.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Entry;

std::shared_ptr<const CompiledPolicy> GlobPolicy(const std::string& glob) {
  Loader loader = testing::MakeLoader();
  return loader.Load(testing::Src("guardpolicy 1\nunsafe policy p {\n  drop when name glob \"" + glob + "\"\n}\n"), "", {});
}

bool Matches(const CompiledPolicy& p, const std::string& name) {
  return Entry().Str("name", name).Run(p.program()).decision == Decision::kDrop;
}

// Issue 17 item 8: a `]` right after `[` or `[!` is a member of the class.
TEST(Glob, CloseBracketFirstInAClassIsAMember) {
  auto one = GlobPolicy("[]]");
  EXPECT_TRUE(Matches(*one, "]"));
  EXPECT_FALSE(Matches(*one, "a"));
  EXPECT_FALSE(Matches(*one, "]]"));
  auto four = GlobPolicy("x[]abc]");
  for (const char* yes : {"x]", "xa", "xb", "xc"}) EXPECT_TRUE(Matches(*four, yes)) << yes;
  for (const char* no : {"x", "xd", "x]a", "]"}) EXPECT_FALSE(Matches(*four, no)) << no;
  auto negated = GlobPolicy("[!]]y");
  EXPECT_TRUE(Matches(*negated, "ay"));
  EXPECT_FALSE(Matches(*negated, "]y"));
}

// fnmatch(3) (glibc, FNM_NOESCAPE: a backslash is literal, as in our globs) is the oracle,
// in a UTF-8 locale: `?` and a class match one character, not one byte.
TEST(Glob, AgreesWithFnmatch) {
  ASSERT_NE(std::setlocale(LC_CTYPE, "C.UTF-8"), nullptr);
  const char* patterns[] = {"[]]",  "[]abc]", "[!]]",  "[!]a]x", "a[]-c]b", "[a-]",   "[-a]",    "[!a-c]x",
                            "*.[ch]", "?[]]?", "[",     "[!",     "[]",      "[!]",    "a[b",     "[[]",
                            "[*]",  "[?]",    "x*y?z", "[a-cx-z]", "[--0]", "*]", "[!!]", "\\*", "[\\]]", "é[é]", "?é"};
  const char* names[] = {"",   "]",   "a",  "b",   "d",    "-",   "[",     "!",   "x",   "xy",  "xay", "a]b",
                         "ab", "abc", "*",  "?",   "a.c",  "a.h", "]]",    "x]y", "0",   "/",   "a[b", "[]",
                         "[!]", "xyz", "x1y2z", "ax", "dx", "]x", "\\", "\\*", "\\]", "é", "éé", "ééa", "a]", ".", "/"};
  for (const char* pattern : patterns) {
    auto p = GlobPolicy(std::string(pattern).find('\\') == std::string::npos
                            ? pattern
                            : [&] {
                                std::string escaped;
                                for (const char* c = pattern; *c; ++c) escaped += *c == '\\' ? std::string("\\\\") : std::string(1, *c);
                                return escaped;
                              }());
    for (const char* name : names) {
      EXPECT_EQ(Matches(*p, name), fnmatch(pattern, name, FNM_NOESCAPE) == 0) << "glob " << pattern << " on " << name;
    }
  }
  std::setlocale(LC_CTYPE, "C");
}

// Problems are said in glob terms; the regex the glob becomes is never quoted.
TEST(Glob, ErrorsQuoteTheGlobNotTheGeneratedRegex) {
  Loader loader = testing::MakeLoader();
  auto reversed = loader.Lint(testing::Src("guardpolicy 1\nunsafe policy p {\n  drop when name glob \"a[z-a]\"\n}\n"));
  ASSERT_EQ(reversed.diagnostics.size(), 1u) << RenderText(reversed.diagnostics);
  const Diagnostic& d = reversed.diagnostics.items()[0];
  EXPECT_EQ(d.code, codes::kBadRegex);
  EXPECT_EQ(d.message, "invalid glob pattern: the range `z-a` in `[z-a]` is reversed, so it matches nothing");
  EXPECT_EQ(d.help, "globs use `*`, `?`, `[abc]`, `[!abc]` and ranges `[a-z]`; a `]` first in a class is a member");
  auto long_glob = loader.Lint(
      testing::Src("guardpolicy 1\nunsafe policy p {\n  drop when name glob \"" + std::string(3000, '*') + "\"\n}\n"));
  ASSERT_EQ(long_glob.diagnostics.size(), 1u);
  EXPECT_EQ(long_glob.diagnostics.items()[0].message,
            "glob pattern of 3000 bytes is too long: it makes a 6006-byte regex, over the limit of 4096");
  // A glob in a parameter, checked when bound.
  Literal bad;
  bad.kind = Literal::Kind::kString;
  bad.str = "[9-0]";
  try {
    loader.Load(testing::Src("guardpolicy 1\nunsafe policy p(g: string = \"x\") {\n  drop when name glob g\n}\n"), "",
                {{"g", bad}});
    FAIL();
  } catch (const PolicyError& e) {
    EXPECT_EQ(e.diagnostics().items()[0].message,
              "invalid glob pattern: the range `9-0` in `[9-0]` is reversed, so it matches nothing");
  }
}

}  // namespace
}  // namespace guardpolicy
