// file_io.h: reading and writing the files a user names, without surprises.
//
// Every path guardpolicy reads (policy sources, artifacts, schemas, snapshots) goes through
// ReadRegularFile, every file it writes (`compile -o`, `fmt`, `Policy.save`, the Python
// tools' outputs) through WriteFileReplacing. Neither ever blocks on a FIFO, reads a device
// or writes through one, and a write never leaves a partial file behind.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace guardpolicy {

// What kind of file `mode` (a stat() st_mode) is, for messages: "a directory", "a FIFO",
// "a character device", ...; "" for a regular file.
std::string NonRegularKind(unsigned mode);

struct ReadResult {
  std::string text;
  std::string error;       // "" on success, else why (the OS reason, "is a directory", ...)
  int err_no = 0;          // with an error: its errno; EFBIG: over `max_bytes`, EINVAL: a FIFO,
                           // a device or a socket, EISDIR: a directory
};

// Reads the regular file `path` (symbolic links followed), at most `max_bytes` of it.
// A FIFO, device, socket or directory is refused without being read (never blocks).
ReadResult ReadRegularFile(const std::string& path, size_t max_bytes);

struct WriteResult {
  int err_no = 0;     // 0 on success, else an errno value fitting the refusal (EISDIR, EACCES, ...)
  std::string error;  // "" on success, else why, e.g. "it is a FIFO, not a regular file"
  bool ok() const { return err_no == 0; }
};

// "" when WriteFileReplacing(path, ..., inputs) would go ahead, else the refusal (below);
// lets a long job refuse a bad output path before it starts.
WriteResult CheckOutputPath(const std::string& path, const std::vector<std::string>& inputs = {});

// Replaces the contents of `path` by `bytes`: written to a temporary file in the same
// directory, flushed, then renamed over `path` (through a symbolic link, its target), so
// readers see the old file or the new one, never a part. An existing target keeps its mode
// (and its owner, where allowed). Refused, with `path` untouched:
//   - a target that is not a regular file (directory, FIFO, device, socket);
//   - a target that is one of `inputs` (the same file, by device and inode);
//   - a read-only target (no write permission bit, or access(W_OK) fails).
WriteResult WriteFileReplacing(const std::string& path, const std::string& bytes,
                               const std::vector<std::string>& inputs = {});

}  // namespace guardpolicy
