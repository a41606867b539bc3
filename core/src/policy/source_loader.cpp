// source_loader.cpp: reading policy files with clear errors.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/policy.h"

namespace guardpolicy {
namespace {

[[noreturn]] void IoError(const std::string& path, const std::string& why) {
  Diagnostics d;
  d.Error(codes::kIoError, {}, fmt::format("cannot read `{}`: {}", path, why));
  throw PolicyError(std::move(d));
}

}  // namespace

SourceFilePtr SourceFileFromPath(const std::string& path, const CompileOptions& options) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) IoError(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) IoError(path, "is a directory");
  if (!S_ISREG(st.st_mode)) IoError(path, "not a regular file");
  if (static_cast<uint64_t>(st.st_size) > options.max_source_bytes) {
    Diagnostics d;
    d.Error(codes::kSourceTooLarge, {},
            fmt::format("`{}` is {} bytes, over the limit of {}", path, st.st_size,
                        options.max_source_bytes));
    throw PolicyError(std::move(d));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) IoError(path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) IoError(path, "read failed");
  return std::make_shared<const SourceFile>(path, text.str());
}

}  // namespace guardpolicy
