// snapshot.cpp: JSON guard snapshots (nlohmann-json) -> entry values.
#include "guardpolicy/snapshot.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy {
namespace {

using nlohmann::json;

[[noreturn]] void Bad(const std::string& origin, const std::string& why) {
  Diagnostics d;
  d.Error(codes::kIoError, {}, fmt::format("cannot read guard snapshot `{}`: {}", origin, why),
          "write snapshots with `python -m guardpolicy capture`");
  throw PolicyError(std::move(d));
}

Value FieldValue(const json& x, const Type& type, const Schema& schema, Snapshot& snap) {
  switch (type.kind) {
    case TypeKind::kBool: return Value{x.get<bool>() ? 1 : 0, 0, {}};
    case TypeKind::kInt: return Value{x.get<int64_t>(), 0, {}};
    case TypeKind::kString: return Value{0, 0, snap.Keep(x.get<std::string>())};
    case TypeKind::kEnum: {
      const std::string name = x.get<std::string>();
      return Value{schema.enums()[type.enum_index].Find(name), 0, snap.Keep(name)};
    }
    case TypeKind::kEnumSet: {
      Value set;
      std::string unknown;
      for (const auto& m : x) {
        const std::string name = m.get<std::string>();
        const int k = schema.enums()[type.enum_index].Find(name);
        if (k >= 0) set.bits |= uint64_t{1} << k;
        else unknown += std::string(kSetSeparator) + name;
      }
      if (!unknown.empty()) set.s = snap.Keep(unknown + kSetSeparator);
      return set;
    }
    case TypeKind::kError: break;
  }
  return Value{};
}

FieldValues Row(const json& row, const Schema& schema, Snapshot& snap) {
  FieldValues v;
  for (const FieldInfo& f : schema.fields()) {
    const auto it = row.find(f.name);
    if (it == row.end() || it->is_null()) {
      v[f.name] = Value{f.type.kind == TypeKind::kEnum ? -1 : 0, 0, {}};
    } else {
      v[f.name] = FieldValue(*it, f.type, schema, snap);
    }
  }
  return v;
}

}  // namespace

std::vector<Value> Snapshot::View(const Program& program, const FieldValues& entry) {
  std::vector<Value> view;
  view.reserve(program.fields.size() + 1);
  for (const std::string& f : program.fields) {
    auto it = entry.find(f);
    view.push_back(it == entry.end() ? Value{} : it->second);
  }
  view.emplace_back();
  return view;
}

Snapshot ParseSnapshot(const std::string& json_text, const Schema& schema, const std::string& origin) {
  Snapshot snap;
  try {
    const json doc = json::parse(json_text);
    if (!doc.is_object()) Bad(origin, "the top level is not an object");
    snap.torch = doc.value("torch", "");
    if (doc.contains("rows")) {
      SnapshotFrame frame;
      for (const auto& row : doc.at("rows")) frame.entries.push_back(Row(row, schema, snap));
      snap.frames.push_back(std::move(frame));
    } else if (doc.contains("frames") && doc.at("frames").is_array()) {
      for (const auto& f : doc.at("frames")) {
        SnapshotFrame frame;
        frame.code = f.value("code", "");
        frame.compile_id = f.value("compile_id", "");
        for (const auto& row : f.at("entries")) frame.entries.push_back(Row(row, schema, snap));
        snap.frames.push_back(std::move(frame));
      }
    } else {
      Bad(origin, "neither `frames` nor `rows` is present");
    }
  } catch (const json::exception& e) {
    Bad(origin, e.what());
  }
  return snap;
}

Snapshot LoadSnapshot(const std::string& path, const Schema& schema) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Bad(path, "cannot open it");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseSnapshot(text.str(), schema, path);
}

}  // namespace guardpolicy
