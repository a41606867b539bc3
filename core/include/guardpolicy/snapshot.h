// snapshot.h: guard entries recorded as JSON (`guardpolicy.capture`, `python -m guardpolicy
// capture`), read back as entry views for the VM.
//
// A snapshot is {"torch": version, "schema_version": N, "frames": [{"frame": i, "code":
// name, "compile_id": "0/0", "entries": [row, ...]}, ...]}; bench data files carry "rows"
// at the top level instead of "frames". A row maps every schema field to a JSON value:
// bool, int, string, enum member name (of a closed enum, one of its members; of an open
// one, any name), or a list of names for a set. Absent fields read as false, 0, "", no enum
// member, the empty set.
// Errors: LoadSnapshot throws PolicyError (GP0001) naming the file, the frame and entry
// index ("frame 0 entry 3: ...") and the problem.
#pragma once

#include <cstddef>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/file_io.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// All schema fields of one entry, by name.
using FieldValues = std::map<std::string, Value, std::less<>>;

struct SnapshotFrame {
  std::string code;        // the compiled frame's function name, or ""
  std::string compile_id;  // "0/0", or ""
  std::vector<FieldValues> entries;
};

class Snapshot {
 public:
  std::vector<SnapshotFrame> frames;
  std::string torch;

  // The values of `program`'s fields for one entry, slot-ordered (plus one spare).
  static std::vector<Value> View(const Program& program, const FieldValues& entry);

  // Owns the strings the values view: copied into chunks in the order they are kept, so a
  // frame's strings lie together in memory in entry order (as a host's capture would hold
  // them), not wherever the JSON parser's allocations left room. Views stay valid for the
  // snapshot's life, moves included.
  std::string_view Keep(std::string_view s);

 private:
  static constexpr size_t kChunk = 64 * 1024;
  std::vector<std::unique_ptr<char[]>> chunks_;
  size_t chunk_used_ = 0, chunk_size_ = 0;
};

// Parses snapshot JSON text; `origin` names it in errors.
// The most JSON a snapshot may hold, as stored or once inflated from gzip: 128 MiB, ten
// times the 14,520 rows of bench/data (12 MB). Past it LoadSnapshot refuses the file.
inline constexpr size_t kMaxSnapshotBytes = size_t{128} << 20;

Snapshot ParseSnapshot(const std::string& json_text, const Schema& schema, const std::string& origin);
// The JSON text of the snapshot file `path`, inflated when it is gzip data (by its magic
// bytes); refuses a non-regular file and more than kMaxSnapshotBytes, stored or inflated.
// Python's Snapshot.from_json reads through it too.
ReadResult ReadSnapshotFile(const std::string& path);
// ReadSnapshotFile, then ParseSnapshot; throws PolicyError (GP0001) naming `path`.
Snapshot LoadSnapshot(const std::string& path, const Schema& schema);

}  // namespace guardpolicy
