// format_test.cpp: the formatter is idempotent, keeps comments and never changes meaning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "guardpolicy/formatter.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = fs::path(GUARDPOLICY_SOURCE_DATA_DIR).parent_path();

std::vector<fs::path> PolicyFiles(const std::vector<fs::path>& dirs) {
  std::vector<fs::path> out;
  for (const fs::path& d : dirs) {
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.path().extension() == ".gpol" && e.is_regular_file()) out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Formatted(const std::string& text, const std::string& path = "f.gpol") {
  FormatResult r = Format(testing::Src(text, path));
  EXPECT_TRUE(r.text.has_value()) << RenderText(r.diagnostics);
  return r.text.value_or("");
}

// The parts of a program that decide: code, fields, constants, sets, regexes.
std::string Meaning(const Program& p) {
  std::ostringstream s;
  for (const auto& i : p.image().code) s << int(i.op) << ' ' << i.a << ' ' << i.b << ';';
  for (const auto& f : p.image().fields) s << f << ';';
  for (const auto& c : p.image().constants) s << int(c.type.kind) << c.i << c.s << ';';
  for (const auto& set : p.image().sets) s << set.bits << set.strings.size() << set.ints.size() << ';';
  for (const auto& r : p.image().regexes) s << r << ';';
  return s.str();
}

TEST(Format, EveryFileInPoliciesIsAlreadyFormatted) {
  for (const fs::path& p : PolicyFiles({kRoot / "policies/std", kRoot / "policies/examples", kRoot / "tests/corpus/accept"})) {
    auto file = SourceFileFromPath(p.string());
    FormatResult r = Format(file);
    ASSERT_TRUE(r.text) << p;
    EXPECT_EQ(*r.text, file->text()) << p << " is not formatted; run `guardpolicy fmt " << p.string() << "`";
  }
}

TEST(Format, IdempotentOnTheWholeCorpus) {
  int formatted = 0;
  for (const fs::path& p : PolicyFiles({kRoot / "policies/std", kRoot / "tests/corpus/accept", kRoot / "tests/corpus/reject"})) {
    auto file = SourceFileFromPath(p.string());
    FormatResult once = Format(file);
    if (!once.text) continue;  // syntax errors: nothing to format
    EXPECT_EQ(Formatted(*once.text, p.string()), *once.text) << p;
    ++formatted;
  }
  EXPECT_GE(formatted, 40);
}

TEST(Format, FormattedPoliciesCompileToTheSameBytecode) {
  for (const fs::path& p : PolicyFiles({kRoot / "policies/std", kRoot / "tests/corpus/accept"})) {
    auto file = SourceFileFromPath(p.string());
    Loader loader = testing::MakeLoader();
    auto lint = loader.Lint(file);
    for (const PolicyDecl& decl : lint.module->policies) {
      const std::string before = Meaning(loader.Load(file, decl.name, {})->program());
      const std::string after = Meaning(loader.Load(testing::Src(Formatted(file->text()), p.string()), decl.name, {})->program());
      EXPECT_EQ(before, after) << p << " " << decl.name;
    }
  }
}

TEST(Format, CanonicalLayoutKeepsComments) {
  const std::string messy =
      "# head\nguardpolicy 1   # version\n\n\n\nunsafe   policy p(a: bool=true) {   # header\n"
      "  # before rule\n  drop when (is_global and (has_value)) or not (name == \"x\")  # trailing\n\n\n"
      "  default keep\n  # dangling\n}   # after\ntest p { expect drop { is_global : true } }\n";
  EXPECT_EQ(Formatted(messy),
            "# head\nguardpolicy 1  # version\n\nunsafe policy p(a: bool = true) {  # header\n"
            "  # before rule\n  drop when is_global and has_value or not name == \"x\"  # trailing\n\n"
            "  default keep\n  # dangling\n}  # after\n\ntest p {\n  expect drop { is_global: true }\n}\n");
}

TEST(Format, KeepsParenthesesThatChangeMeaning) {
  EXPECT_EQ(Formatted("guardpolicy 1\nunsafe policy p { drop when is_global and (has_value or value.is_tensor) }\n"),
            "guardpolicy 1\n\nunsafe policy p {\n  drop when is_global and (has_value or value.is_tensor)\n}\n");
  EXPECT_EQ(Formatted("guardpolicy 1\nunsafe policy p { drop when not (is_global and has_value) }\n"),
            "guardpolicy 1\n\nunsafe policy p {\n  drop when not (is_global and has_value)\n}\n");
}

TEST(Format, SyntaxErrorsAreReportedNotFormatted) {
  FormatResult r = Format(testing::Src("guardpolicy 1\npolicy p { drop when }\n"));
  EXPECT_FALSE(r.text);
  EXPECT_TRUE(r.diagnostics.HasErrors());
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

// A lone carriage return ends a comment for the lexer (found by the compile fuzzer): the
// code after it must stay code, and formatting must stay idempotent.
TEST(Format, CarriageReturnEndsAComment) {
  const std::string once = Formatted("guardpolicy 1\n# note\rpolicy p { doc \"d\" }\n");
  EXPECT_EQ(once, "guardpolicy 1\n\n# note\npolicy p {\n  doc \"d\"\n}\n");
  EXPECT_EQ(Formatted(once), once);
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

// Issue 17 item 13: comments beside parameters, set members and test fields stay beside
// them (the list is laid out one item a line); a comment anywhere else inside a construct
// keeps the construct as written. Every comment stays where it was.
TEST(Format, CommentsOnParametersStayOnTheirParameter) {
  const std::string src =
      "guardpolicy 1\n"
      "policy p(\n"
      "  a: bool = true,   # the first\n"
      "  # about b\n"
      "  b: int = 3        # the second\n"
      ") {\n"
      "  keep when a and source.depth > b\n"
      "}\n";
  const std::string want =
      "guardpolicy 1\n"
      "\n"
      "policy p(\n"
      "  a: bool = true,  # the first\n"
      "  # about b\n"
      "  b: int = 3,  # the second\n"
      ") {\n"
      "  keep when a and source.depth > b\n"
      "}\n";
  EXPECT_EQ(Formatted(src), want);
  EXPECT_EQ(Formatted(want), want);
}

TEST(Format, CommentsOnSetMembersStayOnTheirMember) {
  const std::string src =
      "guardpolicy 1\n"
      "unsafe policy p {\n"
      "  drop when guard_type in {ID_MATCH,   # modules\n"
      "      TYPE_MATCH,  # classes\n"
      "      # and the last\n"
      "      DICT_VERSION} and not is_global  # why\n"
      "  default keep\n"
      "}\n"
      "test p {\n"
      "  expect drop {\n"
      "    guard_type: \"ID_MATCH\",  # a module\n"
      "    name: \"self.fc\"\n"
      "  }\n"
      "}\n";
  const std::string want =
      "guardpolicy 1\n"
      "\n"
      "unsafe policy p {\n"
      "  drop when guard_type in {\n"
      "    ID_MATCH,  # modules\n"
      "    TYPE_MATCH,  # classes\n"
      "    # and the last\n"
      "    DICT_VERSION,\n"
      "  } and not is_global  # why\n"
      "  default keep\n"
      "}\n"
      "\n"
      "test p {\n"
      "  expect drop {\n"
      "    guard_type: \"ID_MATCH\",  # a module\n"
      "    name: \"self.fc\",\n"
      "  }\n"
      "}\n";
  EXPECT_EQ(Formatted(src), want);
  EXPECT_EQ(Formatted(want), want);
  // The same policy: formatting never changes meaning.
  Loader loader = testing::MakeLoader();
  EXPECT_EQ(Meaning(loader.Load(testing::Src(src), "p", {})->program()),
            Meaning(loader.Load(testing::Src(want), "p", {})->program()));
}

TEST(Format, ACommentInsideAConditionKeepsTheRuleAsWritten) {
  const std::string src =
      "guardpolicy 1\n"
      "\n"
      "unsafe policy p {\n"
      "  drop when is_global and  # globals\n"
      "      name startswith \"G\"   \n"
      "  default keep\n"
      "}\n";
  const std::string want =
      "guardpolicy 1\n"
      "\n"
      "unsafe policy p {\n"
      "  drop when is_global and  # globals\n"
      "      name startswith \"G\"\n"
      "  default keep\n"
      "}\n";
  EXPECT_EQ(Formatted(src), want);
  EXPECT_EQ(Formatted(want), want);
}

}  // namespace
}  // namespace guardpolicy
