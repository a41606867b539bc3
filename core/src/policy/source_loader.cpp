// source_loader.cpp: reading policy files with clear errors.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  // POSIX reads, so that a read error (EIO, EISDIR, ...) is reported, not read as "empty".
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) IoError(path, std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      IoError(path, std::strerror(err));
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > options.max_source_bytes) {  // grew while we read it
      ::close(fd);
      Diagnostics d;
      d.Error(codes::kSourceTooLarge, {}, fmt::format("`{}` is over the limit of {} bytes", path,
                                                      options.max_source_bytes));
      throw PolicyError(std::move(d));
    }
  }
  ::close(fd);
  return std::make_shared<const SourceFile>(path, std::move(text));
}

}  // namespace guardpolicy
