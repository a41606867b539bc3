// read_file.cpp: reading a named regular file, refusing anything that could block or stream.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "guardpolicy/file_io.h"

namespace guardpolicy {

std::string NonRegularKind(unsigned mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

ReadResult Failed(int err_no, std::string why) {
  ReadResult r;
  r.error = std::move(why);
  r.err_no = err_no;
  return r;
}

ReadResult Refused(unsigned mode) {
  if (S_ISDIR(mode)) return Failed(EISDIR, "is a directory");
  return Failed(EINVAL, fmt::format("is {}, not a regular file", NonRegularKind(mode)));
}

ReadResult OsError() {
  const int e = errno;
  return Failed(e, std::strerror(e));
}

}  // namespace

ReadResult ReadRegularFile(const std::string& path, size_t max_bytes) {
  // stat first: opening some devices has effects of its own (a tape rewinds, a watchdog
  // starts). Then O_NONBLOCK, should the path have become a FIFO since (an open with no
  // writer would wait forever), and fstat judges the very file opened.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return OsError();
  if (!S_ISREG(st.st_mode)) return Refused(st.st_mode);
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (f.fd < 0) return OsError();
  if (::fstat(f.fd, &st) != 0) return OsError();
  if (!S_ISREG(st.st_mode)) return Refused(st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Failed(EFBIG, fmt::format("is {} bytes, over the limit of {}", st.st_size, max_bytes));
  }
  // Back to blocking reads (regular files ignore the flag, but say what we mean).
  ::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) & ~O_NONBLOCK);
  ReadResult r;
  r.text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return OsError();  // EIO and the like: never read as "empty"
    }
    r.text.append(buf, static_cast<size_t>(n));
    if (r.text.size() > max_bytes) {  // grew while we read it
      return Failed(EFBIG, fmt::format("is over the limit of {} bytes", max_bytes));
    }
  }
  return r;
}

}  // namespace guardpolicy
