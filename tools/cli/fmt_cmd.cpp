// fmt_cmd.cpp: `guardpolicy fmt [--check] FILE...`.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli.h"
#include "context.h"
#include "guardpolicy/formatter.h"

namespace guardpolicy::cli {
namespace {

// Replaces `path` by `text` atomically: a temporary file beside it, then rename, so a
// failure leaves the original untouched.
bool WriteAtomically(const std::string& path, const std::string& text, std::string& error) {
  const std::string tmp = path + ".gpfmt.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      error = "cannot write " + tmp;
      std::remove(tmp.c_str());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::permissions(tmp, std::filesystem::status(path, ec).permissions(), ec);
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    error = ec.message();
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

int RunFmt(const Context& ctx, const std::vector<std::string>& files, bool check) {
  bool changed = false, failed = false;
  for (const std::string& path : files) {
    SourceFilePtr file;
    try {
      file = SourceFileFromPath(path);
    } catch (const PolicyError& e) {
      *ctx.err << RenderText(e.diagnostics());
      failed = true;
      continue;
    }
    FormatResult r = Format(file);
    if (!r.text) {
      *ctx.err << RenderText(r.diagnostics);
      failed = true;
      continue;
    }
    if (*r.text == file->text()) continue;
    changed = true;
    if (check) {
      *ctx.out << "would reformat " << path << "\n";
      continue;
    }
    std::string error;
    if (!WriteAtomically(path, *r.text, error)) {
      *ctx.err << fmt::format("guardpolicy: cannot rewrite `{}`: {}\n", path, error);
      failed = true;
    }
  }
  if (failed) return kExitUsage;
  return check && changed ? kExitFindings : kExitClean;
}

}  // namespace guardpolicy::cli
