// snapshot.cpp: JSON guard snapshots (nlohmann-json) -> entry values.
#include "guardpolicy/snapshot.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/file_io.h"
#include "guardpolicy/policy.h"

namespace guardpolicy {
namespace {

using nlohmann::json;

[[noreturn]] void Bad(const std::string& origin, const std::string& why) {
  Diagnostics d;
  d.Error(codes::kIoError, {}, fmt::format("cannot read guard snapshot `{}`: {}", origin, why),
          "write snapshots with `python -m guardpolicy capture`");
  throw PolicyError(std::move(d));
}

struct RowError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A closed enum (GuardSource) holds only its members; an open one (GuardType) any name.
void CheckMember(const std::string& name, const EnumInfo& info, const FieldInfo& f) {
  if (info.open || info.Find(name) >= 0) return;
  const std::string best = ClosestMatch(name, info.members);
  throw RowError(fmt::format("field `{}` is `{}`, not a {} member{}", f.name, name, info.name,
                             best.empty() ? "" : fmt::format(" (did you mean `{}`?)", best)));
}

// One field's JSON value, checked against its schema type (no silent conversions).
Value FieldValue(const json& x, const FieldInfo& f, const Schema& schema, Snapshot& snap) {
  const Type& type = f.type;
  auto need = [&](bool ok, const char* what) {
    if (!ok) throw RowError(fmt::format("field `{}` must be {}, not {}", f.name, what, x.type_name()));
  };
  switch (type.kind) {
    case TypeKind::kBool: need(x.is_boolean(), "a bool"); return Value{x.get<bool>() ? 1 : 0, 0, {}};
    case TypeKind::kInt:
      need(x.is_number_integer(), "an integer");
      if (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        throw RowError(fmt::format("field `{}` is out of the 64-bit range", f.name));
      }
      return Value{x.get<int64_t>(), 0, {}};
    case TypeKind::kString: need(x.is_string(), "a string"); return Value{0, 0, snap.Keep(x.get<std::string>())};
    case TypeKind::kEnum: {
      need(x.is_string(), "a member name");
      const std::string name = x.get<std::string>();
      const EnumInfo& info = schema.enums()[type.enum_index];
      CheckMember(name, info, f);
      return Value{info.Find(name), 0, snap.Keep(name)};
    }
    case TypeKind::kEnumSet: {
      need(x.is_array(), "a list of member names");
      Value set;
      std::string unknown;
      for (const auto& m : x) {
        if (!m.is_string()) throw RowError(fmt::format("field `{}` must hold member names", f.name));
        const std::string name = m.get<std::string>();
        CheckMember(name, schema.enums()[type.enum_index], f);
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
  if (!row.is_object()) throw RowError(std::string("a row must be an object, not ") + row.type_name());
  for (const auto& [key, value] : row.items()) {
    if (schema.FindField(key) < 0) {
      const std::string best = ClosestMatch(key, schema.FieldNames());
      throw RowError(fmt::format("unknown field `{}`{}", key, best.empty() ? "" : ", did you mean `" + best + "`?"));
    }
  }
  FieldValues v;
  for (const FieldInfo& f : schema.fields()) {
    const auto it = row.find(f.name);
    if (f.plugin && (it == row.end() || it->is_null())) continue;  // computed by the plugin
    if (it == row.end() || it->is_null()) {
      v[f.name] = Value{f.type.kind == TypeKind::kEnum ? -1 : 0, 0, {}};
    } else {
      v[f.name] = FieldValue(*it, f, schema, snap);
    }
  }
  return v;
}

// Every row of `rows`, naming the one that is wrong by its index: "frame 0 entry 3".
void Rows(const json& rows, const std::string& where, const char* noun, const Schema& schema, Snapshot& snap,
          SnapshotFrame& frame) {
  if (!rows.is_array()) throw RowError(where + " must be a list of rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      frame.entries.push_back(Row(rows[i], schema, snap));
    } catch (const RowError& e) {
      throw RowError(fmt::format("{} {} {}: {}", where, noun, i, e.what()));
    }
  }
}

// Inflates a .json.gz, producing no more than kMaxSnapshotBytes (a small file can
// inflate a thousandfold: stop there, not when memory runs out).
ReadResult Gunzip(const std::string& in) {
  ReadResult r;
  auto fail = [&r](int err_no, std::string why) {
    r.text.clear();
    r.err_no = err_no;
    r.error = std::move(why);
    return std::move(r);
  };
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return fail(ENOMEM, "cannot start gzip decoding");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    const size_t n = sizeof buf - zs.avail_out;
    if (r.text.size() + n > kMaxSnapshotBytes) {
      inflateEnd(&zs);
      return fail(EFBIG, fmt::format("inflates to over {} bytes, the limit for a snapshot", kMaxSnapshotBytes));
    }
    r.text.append(buf, n);
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) return fail(EINVAL, "corrupt gzip data");
  return r;
}

}  // namespace

std::vector<Value> Snapshot::View(const Program& program, const FieldValues& entry) {
  std::vector<Value> view;
  view.reserve(program.image().fields.size() + 1);
  for (const std::string& f : program.image().fields) {
    auto it = entry.find(f);
    view.push_back(it == entry.end() ? Value{} : it->second);
  }
  view.emplace_back();
  return view;
}

std::string_view Snapshot::Keep(std::string_view s) {
  if (s.empty()) return {};
  if (s.size() > chunk_size_ - chunk_used_) {
    chunk_size_ = std::max(kChunk, s.size());
    chunks_.push_back(std::make_unique<char[]>(chunk_size_));
    chunk_used_ = 0;
  }
  char* at = chunks_.back().get() + chunk_used_;
  std::memcpy(at, s.data(), s.size());
  chunk_used_ += s.size();
  return {at, s.size()};
}

Snapshot ParseSnapshot(const std::string& json_text, const Schema& schema, const std::string& origin) {
  Snapshot snap;
  try {
    const json doc = json::parse(json_text);
    if (!doc.is_object()) Bad(origin, "the top level is not an object");
    snap.torch = doc.value("torch", "");
    if (doc.contains("schema_version") && doc.at("schema_version") != 1) {
      Bad(origin, fmt::format("schema version {}, this guardpolicy reads version 1", doc.at("schema_version").dump()));
    }
    if (doc.contains("rows")) {
      SnapshotFrame frame;
      Rows(doc.at("rows"), "`rows`", "row", schema, snap, frame);
      snap.frames.push_back(std::move(frame));
    } else if (doc.contains("frames") && doc.at("frames").is_array()) {
      const json& frames = doc.at("frames");
      for (size_t i = 0; i < frames.size(); ++i) {
        const json& f = frames[i];
        if (!f.is_object() || !f.contains("entries")) throw RowError(fmt::format("frame {} has no `entries`", i));
        SnapshotFrame frame;
        frame.code = f.value("code", "");
        frame.compile_id = f.value("compile_id", "");
        Rows(f.at("entries"), fmt::format("frame {}", i), "entry", schema, snap, frame);
        snap.frames.push_back(std::move(frame));
      }
    } else {
      Bad(origin, "neither `frames` nor `rows` is present");
    }
  } catch (const json::exception& e) {
    Bad(origin, e.what());
  } catch (const RowError& e) {
    Bad(origin, e.what());
  }
  return snap;
}

ReadResult ReadSnapshotFile(const std::string& path) {
  ReadResult file = ReadRegularFile(path, kMaxSnapshotBytes);
  const std::string& bytes = file.text;
  if (!file.error.empty() || bytes.size() < 2 || static_cast<unsigned char>(bytes[0]) != 0x1f ||
      static_cast<unsigned char>(bytes[1]) != 0x8b) {
    return file;
  }
  return Gunzip(bytes);  // a .json.gz, as `capture -o x.json.gz` writes it
}

Snapshot LoadSnapshot(const std::string& path, const Schema& schema) {
  ReadResult file = ReadSnapshotFile(path);
  if (!file.error.empty()) Bad(path, file.error);
  return ParseSnapshot(file.text, schema, path);
}

}  // namespace guardpolicy
