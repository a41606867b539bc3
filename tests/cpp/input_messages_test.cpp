// input_messages_test.cpp: where a diagnostic points and what it shows of the source:
// line ends, long lines, characters a terminal hides, and syntax errors in the user's terms.
#include <gtest/gtest.h>

#include "guardpolicy/diag_codes.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

Diagnostics LintText(const std::string& text) {
  Loader loader = testing::MakeLoader();
  return loader.Lint(testing::Src(text, "t.gpol")).diagnostics;
}

Diagnostic Only(const Diagnostics& ds) {
  EXPECT_EQ(ds.size(), 1u) << RenderText(ds);
  return ds.empty() ? Diagnostic{} : ds.items()[0];
}

// Issue 17 item 9: a lone `\r` ends a line (as it does for the lexer).
TEST(InputMessages, CarriageReturnOnlyLineEnds) {
  const SourceFile f("f", "a\rbc\r\nd\re");
  EXPECT_EQ(f.Locate(2).line, 2);
  EXPECT_EQ(f.Locate(3).col, 2);
  EXPECT_EQ(f.Locate(6).line, 3);
  EXPECT_EQ(f.Locate(8).line, 4);
  EXPECT_EQ(f.Line(2), "bc");
  EXPECT_EQ(f.Line(3), "d");
  EXPECT_EQ(f.Line(4), "e");
  const Diagnostics ds = LintText("guardpolicy 1\rpolicy p {\r  keep when is_global\r  keep when nmae == \"x\"\r}\r");
  const Diagnostic d = Only(ds);
  EXPECT_EQ(d.code, codes::kUnknownField);
  EXPECT_EQ(d.range.ToString(), "t.gpol:4:13");
  EXPECT_EQ(RenderText(d),
            "t.gpol:4:13: error[GP2001]: unknown field `nmae`\n"
            "  4 |   keep when nmae == \"x\"\n"
            "    |             ^^^^\n"
            "  = help: did you mean `name`?\n");
  // A syntax error after the last line end (the end of the file) is placed there too.
  const Diagnostic eof = Only(LintText("guardpolicy 1\rpolicy p {\r  keep when is_global\r"));
  EXPECT_EQ(eof.range.ToString(), "t.gpol:4:1");
}

// The input checks end a comment at a lone `\r` too: it does not hide the nesting limit.
TEST(InputMessages, CarriageReturnEndsACommentForTheNestingCheck) {
  const std::string deep = std::string(70, '(') + "is_global" + std::string(70, ')');
  const Diagnostics ds = LintText("guardpolicy 1\r# note\rpolicy p { keep when " + deep + " }\n");
  ASSERT_FALSE(ds.empty());
  EXPECT_EQ(ds.items()[0].code, codes::kNestingTooDeep);
  EXPECT_EQ(ds.items()[0].range.ToString(), "t.gpol:3:85");
}

// Issue 17 item 10: a long line is shown as a window around the caret.
TEST(InputMessages, LongLineShowsAWindowAroundTheCaret) {
  const std::string filler(1000000, 'x');
  const std::string text = "guardpolicy 1\npolicy p { keep when name == \"" + filler + "\" or nmae == \"y\" }\n";
  const Diagnostic d = Only(LintText(text));
  const std::string out = RenderText(d);
  EXPECT_LT(out.size(), 600u) << out.substr(0, 600);
  EXPECT_EQ(out, "t.gpol:2:" + std::to_string(filler.size() + 36) +
                     ": error[GP2001]: unknown field `nmae`\n"
                     "  2 | ..." + std::string(55, 'x') + "\" or nmae == \"y\" }\n"
                     "    |    " + std::string(60, ' ') + "^^^^\n"
                     "  = help: did you mean `name`?\n");
}

// A long name quoted in a message is shortened in the text too (sibling of item 10).
TEST(InputMessages, LongQuotedNamesAreShortened) {
  const std::string name(200000, 'a');
  const Diagnostic d = Only(LintText("guardpolicy 1\npolicy p { keep when " + name + " }\n"));
  EXPECT_EQ(d.message, "unknown field `" + name + "`");  // the value keeps it whole
  const std::string out = RenderText(d);
  EXPECT_LT(out.size(), 700u);
  EXPECT_EQ(out.substr(0, out.find('\n')),
            "t.gpol:2:22: error[GP2001]: unknown field `" + std::string(100, 'a') + "..." + std::string(60, 'a') + "`");
}

// A long path is cut in its middle: the file name stays in the message.
TEST(InputMessages, LongQuotedPathsKeepTheirFileName) {
  Diagnostic d;
  d.code = codes::kIoError;
  d.message = "cannot read `/tmp/" + std::string(300, 'd') + "/missing.gpol`: No such file or directory";
  const std::string out = RenderText(d);
  EXPECT_EQ(out, "error[GP0001]: cannot read `/tmp/" + std::string(95, 'd') + "..." + std::string(47, 'd') +
                     "/missing.gpol`: No such file or directory\n");
}

// Issue 17 item 14: mistakes carried over from other languages get a hint.
TEST(InputMessages, SingleQuotesSayStringsUseDoubleQuotes) {
  const Diagnostic d = Only(LintText("guardpolicy 1\npolicy p {\n  keep when name == 'x'\n}\n"));
  EXPECT_EQ(d.code, codes::kSyntax);
  EXPECT_EQ(d.message, "strings use double quotes, not `'`");
  EXPECT_EQ(d.help, "write \"x\"");
  EXPECT_EQ(d.range.end - d.range.begin, 3u);  // the whole 'x'
}

TEST(InputMessages, AssignAndCStyleOperatorsPointToTheWords) {
  const Diagnostic eq = Only(LintText("guardpolicy 1\npolicy p {\n  keep when name = \"x\"\n}\n"));
  EXPECT_EQ(eq.help, "compare with `==` (`=` only gives a value to a parameter, a `use` argument or a `config` knob)");
  const Diagnostic both = Only(LintText("guardpolicy 1\npolicy p {\n  keep when is_global && has_value\n}\n"));
  EXPECT_EQ(both.message, "`&&` is not an operator");
  EXPECT_EQ(both.help, "write `and`");
  const Diagnostic either = Only(LintText("guardpolicy 1\npolicy p {\n  keep when is_global || has_value\n}\n"));
  EXPECT_EQ(either.message, "`||` is not an operator");
  EXPECT_EQ(either.help, "write `or`");
  const Diagnostic bang = Only(LintText("guardpolicy 1\npolicy p {\n  keep when !is_global\n}\n"));
  EXPECT_EQ(bang.message, "`!` is not an operator");
  EXPECT_EQ(bang.help, "write `not` (`!=` compares)");
}

TEST(InputMessages, UnterminatedString) {
  const Diagnostic d = Only(LintText("guardpolicy 1\npolicy p {\n  keep when name == \"x\n}\n"));
  EXPECT_EQ(d.message, "unterminated string");
  EXPECT_EQ(d.help, "close it with `\"` on the same line (a line break in a string is written `\\n`)");
  EXPECT_EQ(d.range.ToString(), "t.gpol:3:21");
}

TEST(InputMessages, InvisibleCharactersAreShownEscaped) {
  const Diagnostics nbsp = LintText("guardpolicy 1\npolicy p {\n  keep when\xc2\xa0is_global\n}\n");
  EXPECT_EQ(RenderText(nbsp),
            "t.gpol:3:12: error[GP1001]: unexpected character `\\u00a0` (U+00A0, a no-break space)\n"
            "  3 |   keep when\\u00a0is_global\n"
            "    |            ^^^^^^\n"
            "  = help: remove it, or replace it with a plain space\n");
  const Diagnostics control = LintText("guardpolicy 1\npolicy p {\n  keep when \x1b[31mis_global\n}\n");
  const std::string out = RenderText(control);
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(control.items()[0].message, "unexpected character `\\x1b` (U+001B)");
  EXPECT_NE(out.find("  3 |   keep when \\x1b[31mis_global\n    |             ^^^^\n"), std::string::npos) << out;
  // A long token in a message is shortened.
  const Diagnostic long_token =
      LintText("guardpolicy 1\npolicy p {\n  keep when is_global " + std::string(5000, 'y') + "\n}\n").items()[0];
  EXPECT_EQ(long_token.message.find(std::string(41, 'y')), std::string::npos) << long_token.message.size();
}

// A bare enum member after `=` is a syntax error that says how to write it; a string that
// is not a member says so, with the member meant.
TEST(InputMessages, EnumDefaultsAreMemberNamesInStrings) {
  EXPECT_TRUE(LintText("guardpolicy 1\npolicy p(s: GuardSource = \"LOCAL\") {\n  keep when guard_source == s\n}\n").empty());
  const Diagnostic lower =
      Only(LintText("guardpolicy 1\npolicy p(s: GuardSource = \"local\") {\n  keep when guard_source == s\n}\n"));
  EXPECT_EQ(lower.code, codes::kBadParameter);
  EXPECT_EQ(lower.message, "`local` is not a GuardSource member");
  EXPECT_EQ(lower.help, "did you mean \"LOCAL\"?");
  const Diagnostic number =
      Only(LintText("guardpolicy 1\npolicy p(s: GuardSource = 3) {\n  keep when guard_source == s\n}\n"));
  EXPECT_EQ(number.message, "expected a GuardSource member's name in a string, found int");
  const Diagnostic bare =
      Only(LintText("guardpolicy 1\npolicy p(s: GuardSource = LOCAL) {\n  keep when guard_source == s\n}\n"));
  EXPECT_EQ(bare.code, codes::kSyntax);
  EXPECT_EQ(bare.help,
            "after `=` comes a literal: `true`, `false`, a number or a string (an enum member is written as a string: "
            "\"LOCAL\")");
}

}  // namespace
}  // namespace guardpolicy
