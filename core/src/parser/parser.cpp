// parser.cpp: drives the ANTLR lexer and parser and reports syntax errors as diagnostics.
#include "guardpolicy/parser.h"

#include <antlr4-runtime.h>
#include <fmt/format.h>

#include "GuardPolicyLexer.h"
#include "GuardPolicyParser.h"
#include "ast_builder.h"
#include "guardpolicy/diag_codes.h"
#include "input_checks.h"

namespace guardpolicy {
namespace {

// ANTLR quotes tokens as 'x'; our style guide uses backticks.
std::string RestyleMessage(std::string msg) {
  for (char& c : msg) {
    if (c == '\'') c = '`';
  }
  return msg;
}

class DiagnosticListener final : public antlr4::BaseErrorListener {
 public:
  DiagnosticListener(const SourceFilePtr& file, const parser_internal::OffsetMap& offsets,
                     Diagnostics& diags)
      : file_(file), offsets_(offsets), diags_(diags) {}

  void syntaxError(antlr4::Recognizer*, antlr4::Token* token, size_t line, size_t col,
                   const std::string& msg, std::exception_ptr) override {
    SourceRange range{file_, 0, 0};
    if (token != nullptr && token->getStartIndex() != static_cast<size_t>(-1) &&
        token->getType() != antlr4::Token::EOF) {
      range.begin = offsets_.ToByte(token->getStartIndex());
      range.end = offsets_.ToByte(token->getStopIndex() + 1);
    } else {
      // Lexer errors and EOF: ANTLR gives a line and a code-point column.
      range.begin = LineColToByte(static_cast<int>(line), static_cast<int>(col));
      range.end = range.begin + 1;
    }
    diags_.Error(codes::kSyntax, range, RestyleMessage(msg));
  }

 private:
  uint32_t LineColToByte(int line, int col_cp) const {
    uint32_t off = file_->Offset(line, 0);
    const std::string& t = file_->text();
    for (int i = 0; i < col_cp && off < t.size(); ++i) {
      ++off;
      while (off < t.size() && (static_cast<unsigned char>(t[off]) & 0xC0) == 0x80) ++off;
    }
    return off;
  }

  const SourceFilePtr& file_;
  const parser_internal::OffsetMap& offsets_;
  Diagnostics& diags_;
};

void CheckVersion(const Module& module, Diagnostics& diags) {
  if (module.version != 1 && module.version != -1 && module.version_range.valid() &&
      module.version_range.end > module.version_range.begin) {
    diags.Error(codes::kVersion, module.version_range,
                fmt::format("unsupported language version `{}`", module.version),
                "this guardpolicy reads `guardpolicy 1`");
  }
}

// Runs ANTLR on input that passed CheckInput.
ParseResult RunAntlr(const SourceFilePtr& file, const CompileOptions& options, ParseResult result) {
  const parser_internal::OffsetMap offsets(file->text());
  antlr4::ANTLRInputStream input(file->text());
  gp_antlr::GuardPolicyLexer lexer(&input);
  antlr4::CommonTokenStream tokens(&lexer);
  gp_antlr::GuardPolicyParser parser(&tokens);
  DiagnosticListener listener(file, offsets, result.diagnostics);
  lexer.removeErrorListeners();
  lexer.addErrorListener(&listener);
  parser.removeErrorListeners();
  parser.addErrorListener(&listener);

  auto* tree = parser.file_();
  result.module = parser_internal::BuildModule(tree, file, offsets, options.max_expr_depth, result.diagnostics);
  CheckVersion(*result.module, result.diagnostics);
  return result;
}

}  // namespace

ParseResult Parse(SourceFilePtr file, const CompileOptions& options) {
  ParseResult result;
  if (!parser_internal::CheckInput(file, options, result.diagnostics)) return result;
  try {
    return RunAntlr(file, options, std::move(result));
  } catch (const std::exception& e) {  // defense in depth: the ANTLR runtime throws on input it cannot take
    ParseResult refused;
    refused.diagnostics.Error(codes::kSyntax, {file, 0, 0},
                              std::string("the parser refused the input: ") + e.what());
    return refused;
  }
}

}  // namespace guardpolicy
