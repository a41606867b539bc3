// syntax_errors.h: ANTLR's syntax errors as GP1001 diagnostics, in the user's terms.
//
// SyntaxErrorStrategy is ANTLR's default recovery with our wording: tokens in backticks,
// shown escaped and shortened (display_text.h), `end of file` for EOF. SyntaxErrorListener
// turns each report into a diagnostic and adds what a newcomer needs for mistakes carried
// over from other languages: single quotes, `=`, `&&`/`||`/`!`, an unterminated string, a
// stray invisible character, a bare enum member after `=`. Errors inside a range one of those already explains are not
// repeated.
#pragma once

#include <antlr4-runtime.h>

#include "ast_builder.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy::parser_internal {

class SyntaxErrorListener final : public antlr4::BaseErrorListener {
 public:
  SyntaxErrorListener(const SourceFilePtr& file, const OffsetMap& offsets, Diagnostics& diags)
      : file_(file), offsets_(offsets), diags_(diags) {}

  void syntaxError(antlr4::Recognizer* recognizer, antlr4::Token* token, size_t line, size_t col,
                   const std::string& msg, std::exception_ptr e) override;

 private:
  SourceRange TokenRange(antlr4::Recognizer* recognizer, antlr4::Token* token) const;
  // Rewrites `message`, `range` and `help` for the mistakes named above; false when none.
  bool Explain(antlr4::Recognizer* recognizer, antlr4::Token* token, SourceRange& range, std::string& message, std::string& help);
  uint32_t LineEnd(uint32_t offset) const;

  const SourceFilePtr& file_;
  const OffsetMap& offsets_;
  Diagnostics& diags_;
  uint32_t quiet_until_ = 0;  // errors starting before this byte are already explained
};

class SyntaxErrorStrategy final : public antlr4::DefaultErrorStrategy {
 protected:
  void reportInputMismatch(antlr4::Parser* recognizer, const antlr4::InputMismatchException& e) override;
  void reportUnwantedToken(antlr4::Parser* recognizer) override;
  void reportMissingToken(antlr4::Parser* recognizer) override;
  std::string getTokenErrorDisplay(antlr4::Token* t) override;
  std::string escapeWSAndQuote(const std::string& s) const override;
};

}  // namespace guardpolicy::parser_internal
