// context.cpp: data-directory resolution for the CLI.
#include "context.h"

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/plugin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace guardpolicy::cli {

namespace {

mode_t CurrentUmask() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

}  // namespace

int ExitCodeFor(const Diagnostics& diagnostics) {
  for (const Diagnostic& d : diagnostics.items()) {
    if (d.code == codes::kIoError || d.code == codes::kSourceTooLarge || d.code == codes::kBadArtifact) return 2;
  }
  return diagnostics.HasErrors() ? 1 : 0;
}

int ReportLoadError(const Context& ctx, const PolicyError& e) {
  *ctx.err << RenderText(e.diagnostics());
  return ExitCodeFor(e.diagnostics());
}

std::unique_ptr<Loader> Context::MakeLoader() const {
  const std::filesystem::path dir(data_dir);
  const std::string schema_file =
      schema_path.empty() ? (dir / "schema" / "guard_entry.yaml").string() : schema_path;
  Schema schema = Schema::FromFile(schema_file);
  for (const std::string& path : plugins) schema = schema.WithPlugin(Plugin::Load(path));
  CompileOptions options;
  options.opt_level = opt_level;
  return std::make_unique<Loader>(std::make_shared<const Schema>(std::move(schema)), (dir / "std").string(),
                                  options);
}

std::string WriteFileAtomically(const std::string& path_in, const std::string& bytes) {
  std::error_code ec;
  // Through a symbolic link, replace the file it points to, not the link.
  const std::filesystem::path path = std::filesystem::exists(path_in, ec)
                                         ? std::filesystem::canonical(path_in, ec)
                                         : std::filesystem::path(path_in);
  std::string tmp = (path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path()) /
                    ("." + path.filename().string() + ".XXXXXX");
  const int fd = ::mkstemp(tmp.data());  // a fresh name: never clobbers another file
  if (fd < 0) return "cannot create a temporary file beside it: " + std::string(std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return "cannot write: " + why;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return "cannot write: " + std::string(std::strerror(errno));
  }
  struct stat st {};
  const mode_t mode = ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : (0666 & ~CurrentUmask());
  ::chmod(tmp.c_str(), mode);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  return {};
}

}  // namespace guardpolicy::cli
