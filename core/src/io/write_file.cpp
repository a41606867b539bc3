// write_file.cpp: replacing a file's contents atomically, refusing what must not be replaced.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "guardpolicy/file_io.h"

namespace guardpolicy {
namespace {

WriteResult Refused(int err_no, std::string why) { return WriteResult{err_no, std::move(why)}; }

// A new file beside `path`, `.NAME.XXXXXX`, created 0666 less the umask like any new file
// (mkstemp's 0600 would need the umask read back, which no thread-safe call does); sets
// `tmp` to its name. Never opens an existing file. -1 with errno on failure.
int CreateTemporary(const std::filesystem::path& path, std::string& tmp) {
  const std::filesystem::path dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string suffix(6, 'x');
    for (char& c : suffix) c = kChars[random() % (sizeof kChars - 1)];
    std::string name = ".";  // appended piecewise: GCC 12's -Wrestrict misfires on "." + string
    name += path.filename().string();
    name += '.';
    name += suffix;
    tmp = (dir / name).string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

bool SameFile(const struct stat& a, const std::string& other) {
  struct stat b {};
  return ::stat(other.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Why the existing file `st` at `path` must not be replaced, or "".
WriteResult CheckTarget(const std::string& path, const struct stat& st, const std::vector<std::string>& inputs) {
  if (S_ISDIR(st.st_mode)) return Refused(EISDIR, "it is a directory");
  if (!S_ISREG(st.st_mode)) return Refused(EINVAL, "it is " + NonRegularKind(st.st_mode) + ", not a regular file");
  for (const std::string& input : inputs) {
    if (SameFile(st, input)) return Refused(EEXIST, "it is the input file `" + input + "`");
  }
  // The mode bits too: root passes access(W_OK) for any file, yet a 0444 file is a request
  // not to change it.
  if ((st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0 || ::access(path.c_str(), W_OK) != 0) {
    return Refused(EACCES, "it is read-only");
  }
  return {};
}

// 0 or the errno of the failed write.
int WriteAll(int fd, const std::string& bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    written += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

WriteResult CheckOutputPath(const std::string& path, const std::vector<std::string>& inputs) {
  if (path.empty()) return Refused(ENOENT, "the path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return CheckTarget(path, st, inputs);
  if (errno != ENOENT) return Refused(errno, std::strerror(errno));
  return {};
}

WriteResult WriteFileReplacing(const std::string& path_in, const std::string& bytes,
                               const std::vector<std::string>& inputs) {
  if (WriteResult r = CheckOutputPath(path_in, inputs); !r.ok()) return r;
  std::filesystem::path path(path_in);
  struct stat st {};
  const bool exists = ::stat(path_in.c_str(), &st) == 0;
  if (exists) {
    std::error_code ec;
    // Through a symbolic link, replace the file it points to, not the link.
    path = std::filesystem::canonical(path_in, ec);
    if (ec) return Refused(ec.value(), ec.message());
  }
  std::string tmp;
  const int fd = CreateTemporary(path, tmp);
  if (fd < 0) {
    const int e = errno;
    return Refused(e, "cannot create a temporary file beside it: " + std::string(std::strerror(e)));
  }
  int failed = WriteAll(fd, bytes);
  if (failed == 0 && ::fsync(fd) != 0) failed = errno;
  // An existing file keeps its mode and, where we may, its owner.
  if (exists) {
    if (st.st_uid != ::geteuid() || st.st_gid != ::getegid()) {
      (void)!::fchown(fd, st.st_uid, st.st_gid);  // only root may give a file away
    }
    ::fchmod(fd, st.st_mode & 07777);  // after fchown, which clears set-id bits
  }
  if (::close(fd) != 0 && failed == 0) failed = errno;
  if (failed != 0) {
    ::unlink(tmp.c_str());
    return Refused(failed, std::strerror(failed));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return Refused(e, std::strerror(e));
  }
  return {};
}

}  // namespace guardpolicy
