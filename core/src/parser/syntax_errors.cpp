// syntax_errors.cpp: wording and hints of syntax errors (see syntax_errors.h).
#include "syntax_errors.h"

#include <fmt/format.h>

#include "GuardPolicyLexer.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/display_text.h"

namespace guardpolicy::parser_internal {
namespace {

using L = gp_antlr::GuardPolicyLexer;

// ANTLR writes a set of token names as `{'a', 'b', IDENT}` or `'a'`: our style is backticks
// (no token of the grammar is a quote character, so every `'` here is ANTLR's).
std::string Expecting(const antlr4::misc::IntervalSet& set, const antlr4::dfa::Vocabulary& vocabulary) {
  std::string text = set.toString(vocabulary);
  for (char& c : text) {
    if (c == '\'') c = '`';
  }
  return text;
}

std::string CharName(uint32_t cp) {
  switch (cp) {
    case 0xA0: return ", a no-break space";
    case 0x200B: return ", a zero-width space";
    case 0xFEFF: return ", a byte-order mark";
    case 0x3000: return ", an ideographic space";
    default: return "";
  }
}

// The type of the default-channel token before `token` (0 when none).
size_t PreviousType(antlr4::Recognizer* recognizer, antlr4::Token* token) {
  auto* parser = dynamic_cast<antlr4::Parser*>(recognizer);
  if (parser == nullptr || token->getTokenIndex() == static_cast<size_t>(-1)) return 0;
  antlr4::TokenStream* tokens = parser->getTokenStream();
  for (size_t i = token->getTokenIndex(); i-- > 0;) {
    antlr4::Token* t = tokens->get(i);
    if (t->getChannel() == antlr4::Token::DEFAULT_CHANNEL) return t->getType();
  }
  return 0;
}

}  // namespace

void SyntaxErrorStrategy::reportInputMismatch(antlr4::Parser* recognizer, const antlr4::InputMismatchException& e) {
  const std::string msg = "mismatched input " + getTokenErrorDisplay(e.getOffendingToken()) + " expecting " +
                          Expecting(e.getExpectedTokens(), recognizer->getVocabulary());
  recognizer->notifyErrorListeners(e.getOffendingToken(), msg, std::make_exception_ptr(e));
}

void SyntaxErrorStrategy::reportUnwantedToken(antlr4::Parser* recognizer) {
  if (inErrorRecoveryMode(recognizer)) return;
  beginErrorCondition(recognizer);
  antlr4::Token* t = recognizer->getCurrentToken();
  const std::string msg = "extraneous input " + getTokenErrorDisplay(t) + " expecting " +
                          Expecting(getExpectedTokens(recognizer), recognizer->getVocabulary());
  recognizer->notifyErrorListeners(t, msg, nullptr);
}

void SyntaxErrorStrategy::reportMissingToken(antlr4::Parser* recognizer) {
  if (inErrorRecoveryMode(recognizer)) return;
  beginErrorCondition(recognizer);
  antlr4::Token* t = recognizer->getCurrentToken();
  const std::string msg = "missing " + Expecting(getExpectedTokens(recognizer), recognizer->getVocabulary()) +
                          " at " + getTokenErrorDisplay(t);
  recognizer->notifyErrorListeners(t, msg, nullptr);
}

std::string SyntaxErrorStrategy::getTokenErrorDisplay(antlr4::Token* t) {
  if (t == nullptr) return "<no token>";
  if (t->getType() == antlr4::Token::EOF) return "`<EOF>`";
  return escapeWSAndQuote(t->getText());
}

std::string SyntaxErrorStrategy::escapeWSAndQuote(const std::string& s) const {
  return fmt::format("`{}`", ShortDisplay(s));
}

SourceRange SyntaxErrorListener::TokenRange(antlr4::Recognizer* recognizer, antlr4::Token* token) const {
  SourceRange range{file_, 0, 0};
  if (token != nullptr && token->getStartIndex() != static_cast<size_t>(-1)) {
    range.begin = offsets_.ToByte(token->getStartIndex());
    range.end = token->getType() == antlr4::Token::EOF ? range.begin + 1 : offsets_.ToByte(token->getStopIndex() + 1);
  } else if (auto* lexer = dynamic_cast<antlr4::Lexer*>(recognizer)) {
    range.begin = offsets_.ToByte(lexer->tokenStartCharIndex);
    range.end = offsets_.ToByte(lexer->tokenStartCharIndex + 1);
  }
  return range;
}

uint32_t SyntaxErrorListener::LineEnd(uint32_t offset) const {
  const std::string& t = file_->text();
  const size_t end = t.find_first_of("\r\n", offset);
  return static_cast<uint32_t>(end == std::string::npos ? t.size() : end);
}

bool SyntaxErrorListener::Explain(antlr4::Recognizer* recognizer, antlr4::Token* token, SourceRange& range, std::string& message, std::string& help) {
  if (token == nullptr) return false;
  const std::string& t = file_->text();
  const std::string text = token->getText();
  const uint32_t at = range.begin;
  if (token->getType() == L::ASSIGN) {
    help = "compare with `==` (`=` only gives a value to a parameter, a `use` argument or a `config` knob)";
    return true;
  }
  if (token->getType() == L::IDENT && PreviousType(recognizer, token) == L::ASSIGN) {
    help = fmt::format("after `=` comes a literal: `true`, `false`, a number or a string (an enum member is written "
                       "as a string: \"{}\")",
                       text);
    return true;
  }
  if (token->getType() != L::ERROR_CHAR) return false;
  if (text == "'") {
    const size_t close = t.find('\'', at + 1);
    const bool same_line = close != std::string::npos && close < LineEnd(at + 1);
    range.end = same_line ? static_cast<uint32_t>(close + 1) : at + 1;
    message = "strings use double quotes, not `'`";
    help = same_line ? fmt::format("write \"{}\"", ShortDisplay(std::string_view(t).substr(at + 1, close - at - 1)))
                     : "write the string in double quotes: \"...\"";
  } else if (text == "\"") {
    range.end = std::max(at + 1, LineEnd(at));
    message = "unterminated string";
    help = "close it with `\"` on the same line (a line break in a string is written `\\n`)";
  } else if (text == "&" || text == "|" || text == "!") {
    const bool doubled = text != "!" && at + 1 < t.size() && t[at + 1] == text[0];
    range.end = at + (doubled ? 2 : 1);
    message = fmt::format("`{}` is not an operator", std::string_view(t).substr(at, range.end - at));
    help = text == "&" ? "write `and`" : text == "|" ? "write `or`" : "write `not` (`!=` compares)";
  } else if (static_cast<unsigned char>(text[0]) >= 0x80 || IsInvisible(text)) {
    const uint32_t cp = CodePointOf(text);
    message = fmt::format("unexpected character `{}` (U+{:04X}{})", DisplayChar(text), cp, CharName(cp));
    help = IsInvisible(text) ? "remove it, or replace it with a plain space"
                             : "names are ASCII letters, digits and `_`; other text goes in a double-quoted string";
  } else {
    return false;
  }
  return true;
}

void SyntaxErrorListener::syntaxError(antlr4::Recognizer* recognizer, antlr4::Token* token, size_t, size_t,
                                      const std::string& msg, std::exception_ptr) {
  SourceRange range = TokenRange(recognizer, token);
  if (range.begin < quiet_until_) return;  // inside a mistake already explained
  std::string message = msg, help;
  if (Explain(recognizer, token, range, message, help)) quiet_until_ = range.end;
  diags_.Error(codes::kSyntax, range, message, help);
}

}  // namespace guardpolicy::parser_internal
