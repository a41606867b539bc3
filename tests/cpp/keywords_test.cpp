// keywords_test.cpp: the keyword list is the grammar's (keywords.h reads the generated lexer).
#include <gtest/gtest.h>
#include <re2/re2.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "guardpolicy/keywords.h"

namespace guardpolicy {
namespace {

// The word tokens of grammar/GuardPolicy.g4 (`POLICY : 'policy' ;`), in file order.
std::vector<std::string> GrammarKeywords() {
  std::ifstream in(std::string(GUARDPOLICY_SOURCE_DATA_DIR) + "/../grammar/GuardPolicy.g4");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const re2::RE2 kToken("(?m)^[A-Z_]+\\s*:\\s*'([a-z_]+)'\\s*;");
  re2::StringPiece rest(text);
  std::vector<std::string> out;
  std::string word;
  while (re2::RE2::FindAndConsume(&rest, kToken, &word)) out.push_back(word);
  return out;
}

TEST(Keywords, AreTheGrammarsWordTokensInOrder) {
  const std::vector<std::string> want = GrammarKeywords();
  ASSERT_GE(want.size(), 20u);
  EXPECT_EQ(Keywords(), want);
  for (const std::string& w : want) EXPECT_TRUE(IsKeyword(w)) << w;
  for (const char* other : {"name", "guard_type", "TENSOR_MATCH", "==", "", "Policy", "policy_"}) {
    EXPECT_FALSE(IsKeyword(other)) << other;
  }
}

}  // namespace
}  // namespace guardpolicy
