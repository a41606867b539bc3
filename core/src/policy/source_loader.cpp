// source_loader.cpp: reading policy files with clear errors.
#include <cerrno>

#include <fmt/format.h>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/file_io.h"
#include "guardpolicy/policy.h"

namespace guardpolicy {

SourceFilePtr SourceFileFromPath(const std::string& path, const CompileOptions& options) {
  ReadResult r = ReadRegularFile(path, options.max_source_bytes);
  if (!r.error.empty()) {
    Diagnostics d;
    if (r.err_no == EFBIG) {
      d.Error(codes::kSourceTooLarge, {}, fmt::format("`{}` {}", path, r.error));
    } else {
      d.Error(codes::kIoError, {}, fmt::format("cannot read `{}`: {}", path, r.error));
    }
    throw PolicyError(std::move(d));
  }
  return std::make_shared<const SourceFile>(path, std::move(r.text));
}

}  // namespace guardpolicy
