// entry_rows.h: guard-entry rows captured from real models (bench/data/entries.json.gz,
// written by bench/capture_entries.py) as entry views for the VM and the reference.
#pragma once

#include <zlib.h>

#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../tests/cpp/reference_interpreter.h"

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
    const auto doc = nlohmann::json::parse(text);
    torch_ = doc.value("torch", "");
    for (const auto& row : doc.at("rows")) rows_.push_back(Convert(row, schema));
  }

  const std::vector<testing::FieldValues>& rows() const { return rows_; }
  const std::string& torch() const { return torch_; }

  // The rows as slot-ordered views for `program`, flattened: row r at [r * fields].
  std::vector<Value> Views(const Program& program) const {
    std::vector<Value> out;
    for (const auto& row : rows_) {
      for (const std::string& f : program.fields) out.push_back(row.at(f));
    }
    return out;
  }

 private:
  std::string_view Keep(std::string s) { return strings_.emplace_back(std::move(s)); }

  testing::FieldValues Convert(const nlohmann::json& row, const Schema& schema) {
    testing::FieldValues v;
    for (const FieldInfo& f : schema.fields()) {
      const auto& x = row.at(f.name);
      switch (f.type.kind) {
        case TypeKind::kBool: v[f.name] = Value{x.get<bool>() ? 1 : 0, 0, {}}; break;
        case TypeKind::kInt: v[f.name] = Value{x.get<int64_t>(), 0, {}}; break;
        case TypeKind::kString: v[f.name] = Value{0, 0, Keep(x.get<std::string>())}; break;
        case TypeKind::kEnum: {
          const std::string name = x.get<std::string>();
          v[f.name] = Value{schema.enums()[f.type.enum_index].Find(name), 0, Keep(name)};
          break;
        }
        case TypeKind::kEnumSet: {
          Value set;
          std::string unknown;
          for (const auto& m : x) {
            const int k = schema.enums()[f.type.enum_index].Find(m.get<std::string>());
            if (k >= 0) set.bits |= uint64_t{1} << k;
            else unknown += std::string(kSetSeparator) + m.get<std::string>();
          }
          if (!unknown.empty()) set.s = Keep(unknown + kSetSeparator);
          v[f.name] = set;
          break;
        }
        case TypeKind::kError: break;
      }
    }
    return v;
  }

  std::deque<std::string> strings_;
  std::vector<testing::FieldValues> rows_;
  std::string torch_;
};

}  // namespace guardpolicy::bench
