// artifact.cpp: writing and reading `.gpolc` files.
#include "guardpolicy/artifact.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/fnv1a.h"

namespace guardpolicy {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'O', 'L', 'C', '\0', '\r', '\n'};
constexpr size_t kMagicNameSize = 5;  // "GPOLC": no policy source starts so
constexpr size_t kHeaderSize = 8 + 4 + 8 + 8 + 8;
constexpr uint32_t kMaxCount = 1u << 20;  // any table longer than this is corrupt

class Writer {
 public:
  template <typename T>
  void Int(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
  }
  void Str(std::string_view s) {
    Int<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void TypeOf(const Type& t) {
    Int<uint8_t>(static_cast<uint8_t>(t.kind));
    Int<int32_t>(t.enum_index);
  }
  void Const(const Constant& c) {
    TypeOf(c.type);
    Int<int64_t>(c.i);
    Int<uint64_t>(c.bits);
    Str(c.s);
  }
  void Lit(const Literal& l) {
    Int<uint8_t>(static_cast<uint8_t>(l.kind));
    Int<int64_t>(l.i);
    Int<uint8_t>(l.b ? 1 : 0);
    Str(l.str);
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

struct Corrupt : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  T Int() {
    Need(sizeof(T));
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    return static_cast<T>(v);
  }
  std::string Str() {
    const uint32_t n = Int<uint32_t>();
    Need(n);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    for (size_t i = 0; i < s.size();) {  // every string was UTF-8 source text
      const size_t len = Utf8SequenceLength(s, i);
      if (len == 0) throw Corrupt("a string is not UTF-8");
      i += len;
    }
    return s;
  }
  uint32_t Count() {
    const uint32_t n = Int<uint32_t>();
    if (n > kMaxCount || n > in_.size() - pos_) throw Corrupt(fmt::format("table of {} entries at byte {}", n, pos_));
    return n;
  }
  Type TypeOf(const Schema& schema) {
    const auto kind = Int<uint8_t>();
    const auto e = Int<int32_t>();
    if (kind > static_cast<uint8_t>(TypeKind::kEnumSet)) throw Corrupt("unknown type kind");
    Type t{static_cast<TypeKind>(kind), e};
    const bool enumish = t.kind == TypeKind::kEnum || t.kind == TypeKind::kEnumSet;
    if (enumish && (e < 0 || static_cast<size_t>(e) >= schema.enums().size())) throw Corrupt("enum index out of range");
    return t;
  }
  Constant Const(const Schema& schema) {
    Constant c;
    c.type = TypeOf(schema);
    c.i = Int<int64_t>();
    c.bits = Int<uint64_t>();
    c.s = Str();
    if (c.type.kind == TypeKind::kEnum &&
        (c.i < -1 || c.i >= static_cast<int64_t>(schema.enums()[c.type.enum_index].members.size()))) {
      throw Corrupt("enum constant out of range");
    }
    return c;
  }
  Literal Lit() {
    Literal l;
    const auto kind = Int<uint8_t>();
    if (kind > static_cast<uint8_t>(Literal::Kind::kBool)) throw Corrupt("unknown literal kind");
    l.kind = static_cast<Literal::Kind>(kind);
    l.i = Int<int64_t>();
    l.b = Int<uint8_t>() != 0;
    l.str = Str();
    return l;
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  void Need(size_t n) const {
    if (n > in_.size() - pos_) throw Corrupt(fmt::format("truncated at byte {}", pos_));
  }
  std::string_view in_;
  size_t pos_ = 0;
};

// The runtime lines (runtime_settings.h), each in the encoding of its type, in the visitor's
// order: format version 5 wrote them so, field by field.
void WriteSetting(Writer& w, const std::optional<OnErrorSetting>& e) {
  w.Int<uint8_t>(static_cast<uint8_t>(e ? e->action : OnError::kKeep));
}
void WriteSetting(Writer& w, const std::optional<StanceSetting>& s) {
  w.Int<uint8_t>(s.has_value());
  w.Str(s ? s->stance : "");
  w.Int<int64_t>(s ? s->after_calls : 0);
}
void WriteSetting(Writer& w, const std::optional<VerifySetting>& v) {
  w.Int<int64_t>(v ? v->every_calls : 0);  // 0: no `verify` line
}
void WriteSetting(Writer& w, const std::optional<OnViolationSetting>& a) {
  w.Int<uint8_t>(a.has_value());
  w.Str(a ? a->action : "");
}
void WriteSetting(Writer& w, const std::optional<DispatchSetting>& d) {
  w.Int<uint8_t>(d.has_value());
  w.Str(d ? d->mode : "");
}
void WriteSetting(Writer& w, const std::vector<ConfigSetting>& config) {
  w.Int<uint32_t>(static_cast<uint32_t>(config.size()));
  for (const ConfigSetting& c : config) {
    w.Str(c.knob);
    w.Lit(c.value);
  }
}

void WriteMeta(Writer& w, const CompiledPolicy& p) {
  const PolicyMeta& m = p.meta();
  w.Str(p.name());
  w.Int<uint8_t>(m.is_unsafe);
  w.Str(m.doc);
  VisitRuntimeSettings(m.runtime,
                       [&](const char*, const auto& setting) { WriteSetting(w, setting); });
  w.Int<uint32_t>(static_cast<uint32_t>(m.params.size()));
  for (const auto& [name, value] : m.params) {
    w.Str(name);
    w.Lit(value);
  }
}

void WriteProgram(Writer& w, const ProgramImage& p) {
  w.Int<uint8_t>(static_cast<uint8_t>(p.default_decision));
  w.Str(p.default_file);
  w.Int<int32_t>(p.default_line);
  w.Int<uint32_t>(static_cast<uint32_t>(p.fields.size()));
  for (size_t i = 0; i < p.fields.size(); ++i) {
    w.Str(p.fields[i]);
    w.TypeOf(p.field_types[i]);
    const std::vector<Constant> none;
    const std::vector<Constant>& args = i < p.field_args.size() ? p.field_args[i] : none;
    w.Int<uint32_t>(static_cast<uint32_t>(args.size()));
    for (const Constant& c : args) w.Const(c);
  }
  w.Int<uint32_t>(static_cast<uint32_t>(p.functions.size()));
  for (const FunctionRef& f : p.functions) {
    w.Str(f.name);
    w.TypeOf(f.result);
    w.Int<uint32_t>(static_cast<uint32_t>(f.args.size()));
    for (const Type& t : f.args) w.TypeOf(t);
  }
  w.Int<uint32_t>(static_cast<uint32_t>(p.constants.size()));
  for (const Constant& c : p.constants) w.Const(c);
  w.Int<uint32_t>(static_cast<uint32_t>(p.sets.size()));
  for (const ConstSet& s : p.sets) {
    w.TypeOf(s.elem);
    w.Int<uint64_t>(s.bits);
    w.Int<uint32_t>(static_cast<uint32_t>(s.strings.size()));
    for (const auto& str : s.strings) w.Str(str);
    w.Int<uint32_t>(static_cast<uint32_t>(s.ints.size()));
    for (const int64_t i : s.ints) w.Int<int64_t>(i);
  }
  w.Int<uint32_t>(static_cast<uint32_t>(p.regexes.size()));
  for (const auto& r : p.regexes) w.Str(r);
  w.Int<uint32_t>(static_cast<uint32_t>(p.rules.size()));
  for (size_t i = 0; i < p.rules.size(); ++i) {
    const RuleInfo& r = p.rules[i];
    w.Str(r.policy);
    w.Str(r.file);
    w.Int<int32_t>(r.line);
    w.Int<int32_t>(r.col);
    w.Int<uint8_t>(static_cast<uint8_t>(r.decision));
    w.Int<int32_t>(i < p.rule_entry.size() ? p.rule_entry[i] : -1);
  }
  w.Int<uint32_t>(static_cast<uint32_t>(p.dispatch_tables.size()));
  for (const auto& table : p.dispatch_tables) {
    w.Int<uint32_t>(static_cast<uint32_t>(table.size()));
    for (const int32_t t : table) w.Int<int32_t>(t);
  }
  w.Int<uint32_t>(static_cast<uint32_t>(p.code.size()));
  for (const Instruction& ins : p.code) {
    w.Int<uint8_t>(static_cast<uint8_t>(ins.op));
    w.Int<uint8_t>(static_cast<uint8_t>(ins.x));
    w.Int<uint8_t>(ins.y);
    w.Int<int32_t>(ins.a);
    w.Int<int32_t>(ins.b);
    w.Int<int32_t>(ins.c);
  }
}

void ReadSetting(Reader& r, std::optional<OnErrorSetting>& e) {
  const auto action = r.Int<uint8_t>();
  if (action > static_cast<uint8_t>(OnError::kRaise)) throw Corrupt("unknown on_error");
  e = OnErrorSetting{static_cast<OnError>(action), {}, {}};
}
void ReadSetting(Reader& r, std::optional<StanceSetting>& s) {
  const bool has = r.Int<uint8_t>() != 0;
  StanceSetting stance;
  stance.stance = r.Str();
  stance.after_calls = r.Int<int64_t>();
  if (has) s = std::move(stance);
}
void ReadSetting(Reader& r, std::optional<VerifySetting>& v) {
  if (const auto every = r.Int<int64_t>(); every > 0) v = VerifySetting{every, {}};
}
void ReadSetting(Reader& r, std::optional<OnViolationSetting>& a) {
  const bool has = r.Int<uint8_t>() != 0;
  std::string action = r.Str();
  if (has) a = OnViolationSetting{std::move(action), {}};
}
void ReadSetting(Reader& r, std::optional<DispatchSetting>& d) {
  const bool has = r.Int<uint8_t>() != 0;
  std::string mode = r.Str();
  if (has) d = DispatchSetting{std::move(mode), {}};
}
void ReadSetting(Reader& r, std::vector<ConfigSetting>& config) {
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    ConfigSetting c;
    c.knob = r.Str();
    c.value = r.Lit();
    config.push_back(std::move(c));
  }
}

PolicyMeta ReadMeta(Reader& r, std::string& name) {
  PolicyMeta m;
  name = r.Str();
  m.is_unsafe = r.Int<uint8_t>() != 0;
  m.doc = r.Str();
  VisitRuntimeSettings(m.runtime, [&](const char*, auto& setting) { ReadSetting(r, setting); });
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    std::string key = r.Str();
    m.params[key] = r.Lit();
  }
  return m;
}

ProgramImage ReadProgram(Reader& r, const Schema& schema) {
  ProgramImage p;
  const auto d = r.Int<uint8_t>();
  if (!IsDecision(d)) throw Corrupt("default decision is not keep, drop or watch");
  p.default_decision = static_cast<Decision>(d);
  p.default_file = r.Str();
  p.default_line = r.Int<int32_t>();
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    p.fields.push_back(r.Str());
    p.field_types.push_back(r.TypeOf(schema));
    std::vector<Constant> args;
    for (uint32_t k = r.Count(), j = 0; j < k; ++j) args.push_back(r.Const(schema));
    p.field_args.push_back(std::move(args));
  }
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    FunctionRef f;
    f.name = r.Str();
    f.result = r.TypeOf(schema);
    for (uint32_t k = r.Count(), j = 0; j < k; ++j) f.args.push_back(r.TypeOf(schema));
    p.functions.push_back(std::move(f));
  }
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) p.constants.push_back(r.Const(schema));
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    ConstSet s;
    s.elem = r.TypeOf(schema);
    s.bits = r.Int<uint64_t>();
    for (uint32_t k = r.Count(), j = 0; j < k; ++j) s.strings.push_back(r.Str());
    for (uint32_t k = r.Count(), j = 0; j < k; ++j) s.ints.push_back(r.Int<int64_t>());
    if (!std::is_sorted(s.strings.begin(), s.strings.end()) || !std::is_sorted(s.ints.begin(), s.ints.end())) {
      throw Corrupt("set elements are not sorted");
    }
    p.sets.push_back(std::move(s));
  }
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) p.regexes.push_back(r.Str());
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    RuleInfo info;
    info.policy = r.Str();
    info.file = r.Str();
    info.line = r.Int<int32_t>();
    info.col = r.Int<int32_t>();
    const auto dec = r.Int<uint8_t>();
    if (!IsDecision(dec)) throw Corrupt("rule decision is not keep, drop or watch");
    info.decision = static_cast<Decision>(dec);
    p.rules.push_back(std::move(info));
    p.rule_entry.push_back(r.Int<int32_t>());
  }
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    std::vector<int32_t> table;
    for (uint32_t k = r.Count(), j = 0; j < k; ++j) table.push_back(r.Int<int32_t>());
    p.dispatch_tables.push_back(std::move(table));
  }
  for (uint32_t n = r.Count(), i = 0; i < n; ++i) {
    Instruction ins;
    ins.op = static_cast<Opcode>(r.Int<uint8_t>());
    ins.x = static_cast<Opcode>(r.Int<uint8_t>());
    ins.y = r.Int<uint8_t>();
    ins.a = r.Int<int32_t>();
    ins.b = r.Int<int32_t>();
    ins.c = r.Int<int32_t>();
    p.code.push_back(ins);
  }
  if (!r.AtEnd()) throw Corrupt("trailing bytes after the program");
  return p;
}

[[noreturn]] void Refuse(const std::string& origin, const std::string& why,
                         const std::string& help = "recompile it with `guardpolicy compile`") {
  Diagnostics d;
  d.Error(codes::kBadArtifact, {}, fmt::format("cannot load compiled policy `{}`: {}", origin, why), help);
  throw PolicyError(std::move(d));
}

}  // namespace

bool LooksLikeArtifact(std::string_view bytes, std::string_view path) {
  const std::string_view magic(kMagic, sizeof(kMagic));
  if (bytes.starts_with(magic.substr(0, kMagicNameSize))) return true;
  return magic.starts_with(bytes) && path.ends_with(".gpolc");  // cut inside the magic, or empty
}

std::string SerializePolicy(const CompiledPolicy& policy, const Schema& schema) {
  Writer payload;
  WriteMeta(payload, policy);
  WriteProgram(payload, policy.program().image());
  Writer out;
  out.bytes().append(kMagic, sizeof(kMagic));
  out.Int<uint32_t>(kArtifactFormatVersion);
  out.Int<uint64_t>(schema.Hash());
  out.Int<uint64_t>(payload.bytes().size());
  out.Int<uint64_t>(Fnv1a64(payload.bytes()));
  out.bytes() += payload.bytes();
  return out.bytes();
}

std::shared_ptr<const CompiledPolicy> DeserializePolicy(const std::string& bytes, const Schema& schema,
                                                        const std::string& origin) {
  const std::string_view magic(kMagic, sizeof(kMagic));
  if (bytes.size() < kHeaderSize && (magic.starts_with(bytes) || bytes.starts_with(magic))) {
    Refuse(origin, fmt::format("truncated: {} bytes, shorter than the {}-byte header", bytes.size(), kHeaderSize));
  }
  if (!std::string_view(bytes).starts_with(magic)) Refuse(origin, "not a .gpolc file (bad magic)");
  Reader header(std::string_view(bytes).substr(sizeof(kMagic), kHeaderSize - sizeof(kMagic)));
  const auto version = header.Int<uint32_t>();
  const auto schema_hash = header.Int<uint64_t>();
  const auto size = header.Int<uint64_t>();
  const auto checksum = header.Int<uint64_t>();
  if (version < kArtifactFormatVersion) {
    Refuse(origin, fmt::format("format version {} is older than this guardpolicy's {}: recompile it from its source",
                               version, kArtifactFormatVersion));
  }
  if (version != kArtifactFormatVersion) {
    Refuse(origin, fmt::format("format version {}, this guardpolicy reads version {}", version, kArtifactFormatVersion));
  }
  if (schema_hash != schema.Hash()) Refuse(origin, "compiled against another schema");
  const std::string_view payload = std::string_view(bytes).substr(kHeaderSize);
  if (payload.size() != size) {
    Refuse(origin, fmt::format("payload is {} bytes, the header says {}", payload.size(), size));
  }
  if (Fnv1a64(payload) != checksum) Refuse(origin, "checksum mismatch (the file is corrupted)");
  std::string name;
  PolicyMeta meta;
  ProgramImage image;
  try {
    Reader r(payload);
    meta = ReadMeta(r, name);
    image = ReadProgram(r, schema);
  } catch (const Corrupt& e) {
    Refuse(origin, e.what());
  }
  image.policy_name = name;
  std::optional<Program> program;
  try {
    program = Program::Link(std::move(image), schema);
  } catch (const LinkError& e) {
    switch (e.kind()) {
      case LinkError::Kind::kUnbound:
        // Fields, filters and functions by name and type: a plugin the policy was compiled
        // with must be loaded again.
        Refuse(origin, e.what(), "load the plugins it was compiled with first (--plugin PATH, guardpolicy.load_plugin)");
      case LinkError::Kind::kBadRegex: Refuse(origin, e.what());
      case LinkError::Kind::kMalformed:
      case LinkError::Kind::kStackTooDeep: Refuse(origin, std::string("bytecode failed verification: ") + e.what());
    }
  }
  return std::make_shared<const CompiledPolicy>(std::move(*program), std::move(meta));
}

}  // namespace guardpolicy
