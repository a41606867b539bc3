// fmt_cmd.cpp: `guardpolicy fmt [--check] FILE...`.
#include <algorithm>

#include <fmt/format.h>

#include "cli.h"
#include "context.h"
#include "guardpolicy/file_io.h"
#include "guardpolicy/formatter.h"

namespace guardpolicy::cli {

namespace {

// The errors of `file` (syntax, names, types: what `lint` reports as errors); warnings are
// lint's business, not fmt's.
Diagnostics Errors(Loader& loader, const SourceFilePtr& file) {
  Diagnostics all;
  try {
    all = loader.Lint(file).diagnostics;
  } catch (const PolicyError& e) {
    all = e.diagnostics();
  }
  Diagnostics errors;
  for (const Diagnostic& d : all.items()) {
    if (d.severity == Severity::kError) errors.Add(d);
  }
  return errors;
}

}  // namespace

int RunFmt(const Context& ctx, const std::vector<std::string>& files, bool check) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
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
    // A file with errors is reported and left alone: what it means is not settled yet.
    if (Diagnostics errors = Errors(*loader, file); errors.HasErrors()) {
      *ctx.err << RenderText(errors);
      rc = std::max(rc, ExitCodeFor(errors));
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
