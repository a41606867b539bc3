// parser.cpp: drives the ANTLR lexer and parser and reports syntax errors as diagnostics.
#include "guardpolicy/parser.h"

#include <antlr4-runtime.h>
#include <fmt/format.h>

#include "GuardPolicyLexer.h"
#include "GuardPolicyParser.h"
#include "ast_builder.h"
#include "guardpolicy/diag_codes.h"
#include "input_checks.h"
#include "syntax_errors.h"

namespace guardpolicy {
namespace {

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
  parser_internal::SyntaxErrorListener listener(file, offsets, result.diagnostics);
  lexer.removeErrorListeners();
  lexer.addErrorListener(&listener);
  parser.removeErrorListeners();
  parser.addErrorListener(&listener);
  parser.setErrorHandler(std::make_shared<parser_internal::SyntaxErrorStrategy>());

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
