// entry_rows.h: guard-entry rows captured from real models (bench/data/entries.json.gz,
// written by bench/capture_entries.py) as entry views for the VM and the reference.
#pragma once

#include <zlib.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "guardpolicy/snapshot.h"

namespace guardpolicy::bench {

class EntryRows {
 public:
  EntryRows(const std::string& gz_path, const Schema& schema) {
    gzFile f = gzopen(gz_path.c_str(), "rb");
    if (f == nullptr) throw std::runtime_error("cannot open " + gz_path);
    std::string text;
    char buf[1 << 16];
    for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, n);
    gzclose(f);
    snapshot_ = ParseSnapshot(text, schema, gz_path);
  }

  const std::vector<FieldValues>& rows() const { return snapshot_.frames.front().entries; }
  const std::string& torch() const { return snapshot_.torch; }

  // The rows as slot-ordered views for `program`, flattened: row r at [r * fields].
  std::vector<Value> Views(const Program& program) const {
    std::vector<Value> out;
    for (const auto& row : rows()) {
      for (const std::string& f : program.image().fields) out.push_back(row.at(f));
    }
    return out;
  }

 private:
  Snapshot snapshot_;
};

}  // namespace guardpolicy::bench
