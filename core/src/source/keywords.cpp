// keywords.cpp: the keyword tokens of the generated lexer's vocabulary.
#include "guardpolicy/keywords.h"

#include <antlr4-runtime.h>
#include <re2/re2.h>

#include <algorithm>

#include "GuardPolicyLexer.h"

namespace guardpolicy {

const std::vector<std::string>& Keywords() {
  static const std::vector<std::string> words = [] {
    antlr4::ANTLRInputStream input("");
    gp_antlr::GuardPolicyLexer lexer(&input);
    const antlr4::dfa::Vocabulary& vocabulary = lexer.getVocabulary();
    static const re2::RE2 kKeyword("'([a-z_]+)'");  // a literal token that is a word: 'policy'
    std::vector<std::string> out;
    for (size_t type = 1; type <= vocabulary.getMaxTokenType(); ++type) {
      std::string word;
      if (re2::RE2::FullMatch(vocabulary.getLiteralName(type), kKeyword, &word))
        out.push_back(word);
    }
    return out;
  }();
  return words;
}

bool IsKeyword(std::string_view word) {
  const std::vector<std::string>& words = Keywords();
  return std::find(words.begin(), words.end(), word) != words.end();
}

}  // namespace guardpolicy
