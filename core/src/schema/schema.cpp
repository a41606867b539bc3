// schema.cpp: reading policies/schema/guard_entry.yaml with yaml-cpp.
#include "guardpolicy/schema.h"

#include "guardpolicy/builtin_filters.h"
#include "guardpolicy/file_io.h"
#include "guardpolicy/fnv1a.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace guardpolicy {
namespace {

constexpr size_t kMaxEnumMembers = 64;  // enum sets are 64-bit masks
constexpr size_t kMaxSchemaBytes = size_t{1} << 20;  // the shipped schema is about 10 KB

[[noreturn]] void Fail(const std::string& origin, const YAML::Node& node, const std::string& what) {
  const YAML::Mark mark = node.Mark();
  throw SchemaError(fmt::format("{}:{}:{}: {}", origin, mark.line + 1, mark.column + 1, what));
}

std::string Scalar(const YAML::Node& node, const char* key, const std::string& origin,
                   bool required = true) {
  const YAML::Node v = node[key];
  if (!v) {
    if (required) Fail(origin, node, fmt::format("missing `{}`", key));
    return {};
  }
  if (!v.IsScalar()) Fail(origin, v, fmt::format("`{}` must be a scalar", key));
  return v.as<std::string>();
}

// One declaration's name into the schema hash, then 0xff (a byte no UTF-8 name has) so
// that ("ab", "c") and ("a", "bc") differ.
void Mix(uint64_t& h, std::string_view s) { h = Fnv1a64("\xff", Fnv1a64(s, h)); }

// A YAML scalar as a literal of `type` (bool, int or string).
Literal LiteralOf(const YAML::Node& node, const Type& type, const std::string& origin) {
  Literal lit;
  if (!node.IsScalar()) Fail(origin, node, "a value must be a scalar");
  try {
    if (type.kind == TypeKind::kBool) {
      lit.kind = Literal::Kind::kBool;
      lit.b = node.as<bool>();
    } else if (type.kind == TypeKind::kInt) {
      lit.kind = Literal::Kind::kInt;
      lit.i = node.as<int64_t>();
    } else {
      lit.kind = Literal::Kind::kString;
      lit.str = node.as<std::string>();
    }
  } catch (const YAML::Exception&) {
    Fail(origin, node, "a value not of the knob's type");
  }
  return lit;
}

// A knob's `min` and `risks` (schema.h, ConfigRisk).
void ReadKnobLimits(ConfigKnob& k, const YAML::Node& node, const std::string& origin) {
  if (const YAML::Node min = node["min"]) {
    if (k.type.kind != TypeKind::kInt) Fail(origin, min, "`min` is for int knobs");
    k.min = LiteralOf(min, k.type, origin).i;
  }
  const YAML::Node risks = node["risks"];
  if (!risks) return;
  if (!risks.IsSequence()) Fail(origin, risks, "`risks` must be a list");
  for (const auto& r : risks) {
    ConfigRisk risk;
    if (r["equals"] && !r["above"]) {
      risk.value = LiteralOf(r["equals"], k.type, origin);
    } else if (r["above"] && !r["equals"] && k.type.kind == TypeKind::kInt) {
      risk.kind = ConfigRisk::Kind::kAbove;
      risk.value = LiteralOf(r["above"], k.type, origin);
    } else {
      Fail(origin, r, "a risk needs `equals: VALUE` or, for an int knob, `above: N`");
    }
    risk.text = Scalar(r, "text", origin);
    risk.help = Scalar(r, "help", origin, false);
    k.risks.push_back(std::move(risk));
  }
}

}  // namespace

bool ConfigRisk::Holds(const Literal& v) const {
  if (v.kind != value.kind) return false;
  if (kind == Kind::kAbove) return v.i > value.i;
  switch (v.kind) {
    case Literal::Kind::kBool: return v.b == value.b;
    case Literal::Kind::kInt: return v.i == value.i;
    case Literal::Kind::kString: return v.str == value.str;
  }
  return false;
}

int EnumInfo::Find(std::string_view member) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == member) return static_cast<int>(i);
  }
  return -1;
}

std::string_view EnumInfo::SinceOf(std::string_view member) const {
  for (const auto& [since_member, release] : since) {
    if (since_member == member) return release;
  }
  return {};
}

int Schema::FindField(std::string_view name) const {
  auto it = field_index_.find(std::string(name));
  return it == field_index_.end() ? -1 : it->second;
}

int Schema::FindEnum(std::string_view name) const {
  for (size_t i = 0; i < enums_.size(); ++i) {
    if (enums_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const ConfigKnob* Schema::FindConfig(std::string_view name) const {
  for (const ConfigKnob& k : config_) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

Type Schema::ParseType(std::string_view name) const {
  if (name == "bool") return Type::Bool();
  if (name == "int") return Type::Int();
  if (name == "string") return Type::String();
  if (name.starts_with("set:")) {
    const int e = FindEnum(name.substr(4));
    return e < 0 ? Type::Error() : Type::EnumSet(e);
  }
  if (name.starts_with("enum:")) name.remove_prefix(5);
  const int e = FindEnum(name);
  return e < 0 ? Type::Error() : Type::Enum(e);
}

std::string Schema::TypeName(const Type& t) const {
  switch (t.kind) {
    case TypeKind::kBool: return "bool";
    case TypeKind::kInt: return "int";
    case TypeKind::kString: return "string";
    case TypeKind::kEnum: return enums_[t.enum_index].name;
    case TypeKind::kEnumSet: return "set of " + enums_[t.enum_index].name;
    case TypeKind::kError: break;
  }
  return "<error>";
}

int Schema::FindFunction(std::string_view name) const {
  for (size_t i = 0; i < functions_.size(); ++i) {
    if (functions_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<std::string> Schema::FunctionNames() const {
  std::vector<std::string> names;
  for (const FunctionInfo& f : functions_) names.push_back(f.name);
  return names;
}

std::vector<std::string> Schema::FieldNames() const {
  std::vector<std::string> names;
  for (const FieldInfo& f : fields_) names.push_back(f.name);
  return names;
}

Schema Schema::FromYaml(const std::string& yaml_text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw SchemaError(fmt::format("{}:{}:{}: {}", origin, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) throw SchemaError(origin + ": the schema must be a YAML mapping");
  Schema s;
  uint64_t h = kFnv1a64OffsetBasis;
  for (const auto& kv : root["enums"]) {
    EnumInfo info;
    info.name = kv.first.as<std::string>();
    info.open = kv.second["open"] && kv.second["open"].as<bool>();
    info.doc = Scalar(kv.second, "doc", origin, false);
    const YAML::Node members = kv.second["members"];
    if (!members || !members.IsSequence()) Fail(origin, kv.second, "`members` must be a list");
    for (const auto& m : members) info.members.push_back(m.as<std::string>());
    if (info.members.size() > kMaxEnumMembers) {
      Fail(origin, members, fmt::format("enum `{}` has over {} members", info.name, kMaxEnumMembers));
    }
    for (const auto& kv_since : kv.second["since"]) {
      const std::string member = kv_since.first.as<std::string>();
      if (info.Find(member) < 0) {
        Fail(origin, kv_since.first, fmt::format("`since` names `{}`, no member of `{}`", member, info.name));
      }
      info.since.emplace_back(member, kv_since.second.as<std::string>());
    }
    Mix(h, info.name);
    for (const auto& m : info.members) Mix(h, m);
    s.enums_.push_back(std::move(info));
  }
  for (const auto& kv : root["fields"]) {
    FieldInfo f;
    f.name = kv.first.as<std::string>();
    const std::string type = Scalar(kv.second, "type", origin);
    f.type = s.ParseType(type);
    if (f.type.is_error()) Fail(origin, kv.second, fmt::format("unknown type `{}`", type));
    f.doc = Scalar(kv.second, "doc", origin);
    f.from = Scalar(kv.second, "from", origin);
    f.since = Scalar(kv.second, "since", origin, false);
    if (s.field_index_.count(f.name)) Fail(origin, kv.first, "duplicate field " + f.name);
    Mix(h, f.name);
    Mix(h, type);
    s.field_index_[f.name] = static_cast<int>(s.fields_.size());
    s.fields_.push_back(std::move(f));
  }
  for (const auto& kv : root["config"]) {
    ConfigKnob k;
    k.name = kv.first.as<std::string>();
    const std::string type = Scalar(kv.second, "type", origin);
    k.type = s.ParseType(type);
    if (k.type.is_error()) Fail(origin, kv.second, fmt::format("unknown type `{}`", type));
    k.doc = Scalar(kv.second, "doc", origin, false);
    ReadKnobLimits(k, kv.second, origin);
    Mix(h, k.name);
    s.config_.push_back(std::move(k));
  }
  for (const auto& st : root["stances"]) s.stances_.push_back(st.as<std::string>());
  for (const auto& a : root["violation_actions"]) s.violation_actions_.push_back(a.as<std::string>());
  for (const auto& m : root["dispatch_modes"]) s.dispatch_modes_.push_back(m.as<std::string>());
  for (const auto& t : root["watch_kept_guard_types"]) s.watch_kept_guard_types_.push_back(t.as<std::string>());
  if (s.fields_.empty()) throw SchemaError(origin + ": the schema declares no fields");
  s.hash_ = h;
  return s;
}

Schema Schema::FromFile(const std::string& path) {
  ReadResult file = ReadRegularFile(path, kMaxSchemaBytes);
  if (!file.error.empty()) throw SchemaError(path + ": cannot read the schema file: " + file.error);
  Schema schema = FromYaml(file.text, path);
  // torch's built-in filters (`builtin.*`) read core fields; a reduced schema without them
  // simply has no built-ins.
  try {
    return schema.WithPlugin(BuiltinPlugin());
  } catch (const PluginError&) {
    return schema;
  }
}

}  // namespace guardpolicy
