// lint.cpp: `guardpolicy lint FILE...`: parse and check, print every diagnostic.
#include "context.h"
#include "cli.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy::cli {

int RunLint(const Context& ctx, const std::vector<std::string>& files, bool werror,
            const std::string& format) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  Diagnostics all;
  bool findings = false;
  bool io_error = false;
  for (const std::string& path : files) {
    Diagnostics diags;
    try {
      diags = loader->Lint(SourceFileFromPath(path)).diagnostics;
    } catch (const PolicyError& e) {
      diags = e.diagnostics();
      io_error = true;
    }
    if (format == "text") *ctx.err << RenderText(diags);
    findings |= diags.HasErrors() || (werror && !diags.empty());
    all.Append(diags);
  }
  if (format == "json") *ctx.out << RenderJson(all);
  if (format == "sarif") *ctx.out << RenderSarif(all, kVersion);
  if (io_error) return kExitUsage;
  return findings ? kExitFindings : kExitClean;
}

}  // namespace guardpolicy::cli
