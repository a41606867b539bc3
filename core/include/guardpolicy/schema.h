// schema.h: the guard-metadata schema (policies/schema/guard_entry.yaml).
//
// Declares the fields a rule can read from a torch._dynamo.types.GuardFilterEntry, the
// enums their values come from, the Dynamo config keys a policy may set and the stances it
// may switch to. Loaded once with yaml-cpp; immutable and thread-safe afterwards.
// Errors: LoadSchema* throw SchemaError naming the file and the YAML position.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "guardpolicy/types.h"

namespace guardpolicy {

class SchemaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EnumInfo {
  std::string name;                  // GuardType, GuardSource
  bool open = false;                 // open enums accept unknown names (checker warning)
  std::vector<std::string> members;  // ordinal = index; at most 64 (sets are 64-bit masks)
  std::string doc;

  int Find(std::string_view member) const;  // ordinal, or -1
};

struct FieldInfo {
  std::string name;  // dotted, e.g. guard_source.is_local
  Type type;
  std::string doc;
  std::string from;   // the torch expression it is read from
  std::string since;  // first torch version
};

struct ConfigKnob {
  std::string name;  // a torch._dynamo.config attribute
  Type type;
  std::string doc;
};

class Schema {
 public:
  const std::vector<FieldInfo>& fields() const { return fields_; }
  const std::vector<EnumInfo>& enums() const { return enums_; }
  const std::vector<ConfigKnob>& config() const { return config_; }
  const std::vector<std::string>& stances() const { return stances_; }

  int FindField(std::string_view name) const;  // index or -1
  int FindEnum(std::string_view name) const;
  const ConfigKnob* FindConfig(std::string_view name) const;
  // Parses a type name as written in a policy parameter or the YAML: bool, int, string,
  // <Enum>, enum:<Enum>, set:<Enum>. Returns Type::Error() when unknown.
  Type ParseType(std::string_view name) const;
  std::string TypeName(const Type& t) const;
  std::vector<std::string> FieldNames() const;
  // FNV-1a hash over the field, enum and config declarations (the .gpolc schema stamp).
  uint64_t Hash() const { return hash_; }

  static Schema FromYaml(const std::string& yaml_text, const std::string& origin);
  static Schema FromFile(const std::string& path);

 private:
  std::vector<FieldInfo> fields_;
  std::vector<EnumInfo> enums_;
  std::vector<ConfigKnob> config_;
  std::vector<std::string> stances_;
  std::unordered_map<std::string, int> field_index_;
  uint64_t hash_ = 0;
};

}  // namespace guardpolicy
