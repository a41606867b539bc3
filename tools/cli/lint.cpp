// lint.cpp: `guardpolicy lint FILE...`: parse and check, print every diagnostic.
#include "context.h"
#include "cli.h"
#include <algorithm>

#include "guardpolicy/diagnostic.h"

namespace guardpolicy::cli {

int RunLint(const Context& ctx, const std::vector<std::string>& files, bool werror,
            const std::string& format) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  Diagnostics all;
  int rc = kExitClean;
  for (const std::string& path : files) {
    Diagnostics diags;
    try {
      diags = loader->Lint(SourceFileFromPath(path)).diagnostics;
    } catch (const PolicyError& e) {
      diags = e.diagnostics();
    }
    if (format == "text") *ctx.err << RenderText(diags);
    rc = std::max(rc, ExitCodeFor(diags));
    if (werror && diags.HasErrorsOrWarnings()) rc = std::max(rc, kExitFindings);
    all.Append(diags);
  }
  if (format == "json") *ctx.out << RenderJson(all);
  if (format == "sarif") *ctx.out << RenderSarif(all, kVersion);
  return rc;
}

}  // namespace guardpolicy::cli
