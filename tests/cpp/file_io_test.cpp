// file_io_test.cpp: ReadRegularFile and WriteFileReplacing (file_io.h), and their users:
// `compile -o`, `fmt`, the plugin loader, the schema and snapshot readers (issue 17: items
// 2, 3 and 5).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli.h"
#include "cli_runner.h"
#include "guardpolicy/file_io.h"
#include "guardpolicy/plugin_loader.h"
#include "guardpolicy/snapshot.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("file_io_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
    return Path(name);
  }
  std::string Fifo(const std::string& name) const {
    EXPECT_EQ(::mkfifo(Path(name).c_str(), 0644), 0) << std::strerror(errno);
    return Path(name);
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Every file of the directory: nothing left behind (no temporary file).
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

using testing::CliResult;
using testing::RunCli;

const std::string kPolicy = "guardpolicy 1\nunsafe policy p { drop when is_global }\n";

// --- reading

TEST_F(FileIo, ReadRefusesFifoDirectoryAndDeviceWithoutBlocking) {
  const std::string fifo = Fifo("p.gpol");
  const ReadResult r = ReadRegularFile(fifo, 1 << 20);  // an open() of it would block forever
  EXPECT_EQ(r.error, "is a FIFO, not a regular file");
  EXPECT_EQ(r.err_no, EINVAL);
  EXPECT_EQ(ReadRegularFile(dir_.string(), 1 << 20).error, "is a directory");
  EXPECT_EQ(ReadRegularFile("/dev/null", 1 << 20).error, "is a character device, not a regular file");
  EXPECT_EQ(ReadRegularFile(Path("missing"), 1 << 20).err_no, ENOENT);
  const ReadResult big = ReadRegularFile(Write("big", std::string(11, 'x')), 10);
  EXPECT_EQ(big.err_no, EFBIG);
  EXPECT_EQ(big.error, "is 11 bytes, over the limit of 10");
  EXPECT_EQ(ReadRegularFile(Write("ok", "abc"), 10).text, "abc");
}

TEST_F(FileIo, PolicyFifoIsAnIoError) {
  const std::string fifo = Fifo("p.gpol");
  const CliResult r = RunCli({"lint", fifo});
  EXPECT_EQ(r.rc, cli::kExitUsage);
  EXPECT_EQ(r.err, "error[GP0001]: cannot read `" + fifo + "`: is a FIFO, not a regular file\n");
}

TEST_F(FileIo, SchemaFifoIsRefused) {
  // std::ifstream on a FIFO waits for a writer forever.
  const std::string fifo = Fifo("schema.yaml");
  try {
    Schema::FromFile(fifo);
    FAIL() << "a FIFO schema was read";
  } catch (const SchemaError& e) {
    EXPECT_EQ(std::string(e.what()), fifo + ": cannot read the schema file: is a FIFO, not a regular file");
  }
}

TEST_F(FileIo, PluginThatIsNotARegularFileIsRefusedBeforeDlopen) {
  for (const std::string& path : {std::string("/dev/null"), dir_.string()}) {
    try {
      LoadPlugin(path);
      FAIL() << path << " was loaded";
    } catch (const PluginError& e) {
      const std::string kind = path == "/dev/null" ? "a character device" : "a directory";
      EXPECT_EQ(std::string(e.what()), path + ": cannot load the plugin: it is " + kind + ", not a regular file");
    }
  }
}

// A gzip stream of `n` bytes of JSON: an object with an empty `rows` list, padded with spaces.
std::string GzipJson(size_t n) {
  const std::string head = "{\"rows\": [", tail = "]}";
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out;
  char buf[1 << 16];
  const std::string spaces(1 << 20, ' ');
  auto feed = [&](const char* data, size_t len, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    zs.avail_in = static_cast<uInt>(len);
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof buf;
      deflate(&zs, flush);
      out.append(buf, sizeof buf - zs.avail_out);
    } while (zs.avail_out == 0);
  };
  feed(head.data(), head.size(), Z_NO_FLUSH);
  for (size_t left = n - head.size() - tail.size(); left > 0;) {
    const size_t k = std::min(left, spaces.size());
    feed(spaces.data(), k, Z_NO_FLUSH);
    left -= k;
  }
  feed(tail.data(), tail.size(), Z_FINISH);
  deflateEnd(&zs);
  return out;
}

TEST_F(FileIo, CompressedSnapshotIsCappedWhenInflated) {
  // About 130 KB on disk, one byte over the limit once inflated.
  const std::string bomb = Write("bomb.json.gz", GzipJson(kMaxSnapshotBytes + 1));
  ASSERT_LT(fs::file_size(bomb), size_t{1} << 20);
  const ReadResult r = ReadSnapshotFile(bomb);
  EXPECT_EQ(r.err_no, EFBIG);
  EXPECT_EQ(r.error, "inflates to over 134217728 bytes, the limit for a snapshot");
  EXPECT_TRUE(r.text.empty());
  const CliResult cli = RunCli({"check", testing::kDataDir + "/std/skip_all_guards.gpol", "--guards", bomb});
  EXPECT_EQ(cli.rc, cli::kExitUsage);
  EXPECT_NE(cli.err.find("cannot read guard snapshot `" + bomb +
                         "`: inflates to over 134217728 bytes, the limit for a snapshot"),
            std::string::npos)
      << cli.err;
  // At the limit exactly, it is read.
  const std::string fits = Write("fits.json.gz", GzipJson(kMaxSnapshotBytes));
  EXPECT_EQ(ReadSnapshotFile(fits).text.size(), kMaxSnapshotBytes);
}

// --- writing

TEST_F(FileIo, CompileRefusesAFifoAndLeavesIt) {
  const std::string src = Write("p.gpol", kPolicy), fifo = Fifo("out.gpolc");
  const CliResult r = RunCli({"compile", src, "-o", fifo});
  EXPECT_EQ(r.rc, cli::kExitUsage);
  EXPECT_EQ(r.err, "guardpolicy: cannot write `" + fifo + "`: it is a FIFO, not a regular file; nothing was written\n");
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(Listing(), (std::vector<std::string>{"out.gpolc", "p.gpol"}));
}

TEST_F(FileIo, CharacterDeviceIsRefusedAsATarget) {
  // Only checked, never written: as root a regression here would replace /dev/null.
  const WriteResult r = CheckOutputPath("/dev/null");
  EXPECT_EQ(r.err_no, EINVAL);
  EXPECT_EQ(r.error, "it is a character device, not a regular file");
  EXPECT_EQ(CheckOutputPath(dir_.string()).error, "it is a directory");
}

TEST_F(FileIo, CompileRefusesToOverwriteItsInput) {
  const std::string src = Write("p.gpol", kPolicy);
  for (const std::string& out : {src, Path("./p.gpol")}) {
    const CliResult r = RunCli({"compile", src, "-o", out});
    EXPECT_EQ(r.rc, cli::kExitUsage);
    EXPECT_EQ(r.err, "guardpolicy: cannot write `" + out + "`: it is the input file `" + src +
                         "`; nothing was written\n  = help: choose another output path with -o\n");
    EXPECT_EQ(Read(src), kPolicy);
  }
  // Through a symbolic link too, and for a hard link (the same inode).
  fs::create_symlink(src, Path("link.gpolc"));
  fs::create_hard_link(src, Path("hard.gpolc"));
  EXPECT_EQ(RunCli({"compile", src, "-o", Path("link.gpolc")}).rc, cli::kExitUsage);
  EXPECT_EQ(RunCli({"compile", src, "-o", Path("hard.gpolc")}).rc, cli::kExitUsage);
  EXPECT_EQ(Read(src), kPolicy);
  // The default output of a file named *.gpolc is the file itself.
  const std::string odd = Write("q.gpolc", kPolicy);
  EXPECT_EQ(RunCli({"compile", odd}).rc, cli::kExitUsage);
  EXPECT_EQ(Read(odd), kPolicy);
}

TEST_F(FileIo, CompileRefusesAReadOnlyFileEvenAsRoot) {
  const std::string src = Write("p.gpol", kPolicy), out = Write("out.gpolc", "keep me");
  fs::permissions(out, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const CliResult r = RunCli({"compile", src, "-o", out});
  EXPECT_EQ(r.rc, cli::kExitUsage);
  EXPECT_EQ(r.err, "guardpolicy: cannot write `" + out + "`: it is read-only; nothing was written\n");
  EXPECT_EQ(Read(out), "keep me");
}

TEST_F(FileIo, CompileReplacesAWritableFileAtomicallyKeepingItsMode) {
  const std::string src = Write("p.gpol", kPolicy), out = Write("out.gpolc", "old");
  fs::permissions(out, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  const CliResult r = RunCli({"compile", src, "-o", out});
  EXPECT_EQ(r.rc, cli::kExitClean) << r.err;
  EXPECT_EQ(Read(out).rfind("GPOLC", 0), 0u);
  EXPECT_EQ(fs::status(out).permissions(), fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(Listing(), (std::vector<std::string>{"out.gpolc", "p.gpol"}));
}

TEST_F(FileIo, NewFileGetsTheUmaskedDefaultMode) {
  const mode_t old = ::umask(022);
  const WriteResult r = WriteFileReplacing(Path("new"), "x");
  ::umask(old);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(fs::status(Path("new")).permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
}

TEST_F(FileIo, FmtLeavesAReadOnlyFileAlone) {
  const std::string messy = "guardpolicy 1\nunsafe policy p {   drop when is_global }\n";
  const std::string path = Write("p.gpol", messy);
  fs::permissions(path, fs::perms::owner_read);
  const CliResult r = RunCli({"fmt", path});
  EXPECT_EQ(r.rc, cli::kExitUsage);
  EXPECT_EQ(r.err, "guardpolicy: cannot rewrite `" + path + "`: it is read-only; it was left as it was\n");
  EXPECT_EQ(Read(path), messy);
}

}  // namespace
}  // namespace guardpolicy
