// fmt_cmd.cpp: `guardpolicy fmt [--check] FILE...`.
#include <algorithm>

#include <fmt/format.h>

#include "cli.h"
#include "context.h"
#include "guardpolicy/file_io.h"
#include "guardpolicy/formatter.h"

namespace guardpolicy::cli {

int RunFmt(const Context& ctx, const std::vector<std::string>& files, bool check) {
  bool changed = false;
  int rc = kExitClean;
  for (const std::string& path : files) {
    SourceFilePtr file;
    try {
      file = SourceFileFromPath(path);
    } catch (const PolicyError& e) {
      rc = std::max(rc, ReportLoadError(ctx, e));
      continue;
    }
    FormatResult r = Format(file);
    if (!r.text) {
      *ctx.err << RenderText(r.diagnostics);
      rc = std::max(rc, ExitCodeFor(r.diagnostics));
      continue;
    }
    if (*r.text == file->text()) continue;
    changed = true;
    if (check) {
      *ctx.out << "would reformat " << path << "\n";
      continue;
    }
    const WriteResult written = WriteFileReplacing(path, *r.text);
    if (!written.ok()) {
      *ctx.err << fmt::format("guardpolicy: cannot rewrite `{}`: {}; it was left as it was\n", path, written.error);
      rc = kExitUsage;
    }
  }
  if (rc != kExitClean) return rc;
  return check && changed ? kExitFindings : kExitClean;
}

}  // namespace guardpolicy::cli
