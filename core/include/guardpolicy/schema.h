// schema.h: the guard-metadata schema (policies/schema/guard_entry.yaml).
//
// Declares the fields a rule can read from a torch._dynamo.types.GuardFilterEntry, the
// enums their values come from, the Dynamo config keys a policy may set and the stances it
// may switch to. Loaded once with yaml-cpp; immutable and thread-safe afterwards.
// Errors: LoadSchema* throw SchemaError naming the file and the YAML position.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "guardpolicy/literal.h"
#include "guardpolicy/types.h"

namespace guardpolicy {

class Plugin;

class SchemaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EnumInfo {
  std::string name;                  // GuardType, GuardSource
  bool open = false;                 // open enums accept unknown names (checker warning)
  std::vector<std::string> members;  // ordinal = index; at most 64 (sets are 64-bit masks)
  std::string doc;
  // The first torch release that produces a member, for members an older supported release
  // does not produce (the YAML's `since` map); empty for the rest.
  std::vector<std::pair<std::string, std::string>> since;

  int Find(std::string_view member) const;              // ordinal, or -1
  std::string_view SinceOf(std::string_view member) const;  // "" when every release has it
};

struct FieldInfo {
  std::string name;  // dotted, e.g. guard_source.is_local
  Type type;
  std::string doc;
  std::string from;   // the torch expression it is read from
  std::string since;  // first torch version
  // Plugin fields (`<plugin>.<field>`): the plugin, its declaration index and the core
  // fields the extractor reads (schema field indices). Core fields: null, -1, empty.
  std::shared_ptr<const Plugin> plugin;
  int decl = -1;
  std::vector<int> reads;
};

// A plugin function (`<plugin>.<fn>(args)`) or filter. A filter called in a condition is
// true when the filter drops the entry; its arguments are its parameters, bound when the
// policy is compiled (literals or policy parameters only).
struct FunctionInfo {
  std::string name;  // qualified: <plugin>.<name>
  std::vector<Type> args;
  std::vector<std::string> arg_names;  // filters: the parameter names; functions: empty
  // filters: each parameter's default (a trailing run of defaults may be left out of a call)
  std::vector<std::optional<Literal>> arg_defaults;
  Type result;                         // bool or int; filters: bool
  std::string doc;
  bool is_filter = false;
  std::shared_ptr<const Plugin> plugin;
  int decl = -1;           // index into the plugin's functions() or filters()
  std::vector<int> reads;  // filters: core field indices each entry view carries
};

// What one value of a config knob costs (the YAML's `risks`): the checker's warning GP2021,
// "`config KNOB = VALUE` <text>", with `help`.
struct ConfigRisk {
  enum class Kind : uint8_t { kEquals, kAbove };  // the value equals `value`; an int above it
  Kind kind = Kind::kEquals;
  Literal value;  // of the knob's type (kAbove: an int)
  std::string text;
  std::string help;

  bool Holds(const Literal& v) const;
};

struct ConfigKnob {
  std::string name;  // a torch._dynamo.config attribute
  Type type;
  std::string doc;
  std::optional<int64_t> min;     // int knobs: the least value (below it: GP2010)
  std::vector<ConfigRisk> risks;  // in the YAML's order
};

class Schema {
 public:
  const std::vector<FieldInfo>& fields() const { return fields_; }
  const std::vector<EnumInfo>& enums() const { return enums_; }
  const std::vector<ConfigKnob>& config() const { return config_; }
  const std::vector<std::string>& stances() const { return stances_; }
  // What `on_violation` may name (recompile, raise, warn) and what `dispatch` may name.
  const std::vector<std::string>& violation_actions() const { return violation_actions_; }
  const std::vector<std::string>& dispatch_modes() const { return dispatch_modes_; }
  // The guard types whose `watch` the runtime honours as `keep`, in schema order.
  const std::vector<std::string>& watch_kept_guard_types() const { return watch_kept_guard_types_; }
  const std::vector<FunctionInfo>& functions() const { return functions_; }
  const std::vector<std::shared_ptr<const Plugin>>& plugins() const { return plugins_; }

  int FindField(std::string_view name) const;  // index or -1
  int FindEnum(std::string_view name) const;
  const ConfigKnob* FindConfig(std::string_view name) const;
  int FindFunction(std::string_view name) const;  // index into functions(), or -1
  const Plugin* FindPlugin(std::string_view ns) const;
  std::vector<std::string> FunctionNames() const;

  // A copy of this schema with `plugin`'s fields, functions and filters added under its
  // namespace. Checks what needs the schema: declared types, `reads` (core fields only),
  // function result types (bool or int), filter parameter types (bool, int, string), and
  // that the namespace is new and no core field's first segment (`guard_source`, `value`,
  // ...). Throws PluginError naming the plugin's file. Defined in schema_plugins.cpp.
  Schema WithPlugin(std::shared_ptr<const Plugin> plugin) const;
  // Parses a type name as written in a policy parameter or the YAML: bool, int, string,
  // <Enum>, enum:<Enum>, set:<Enum>. Returns Type::Error() when unknown.
  Type ParseType(std::string_view name) const;
  std::string TypeName(const Type& t) const;
  std::vector<std::string> FieldNames() const;
  // FNV-1a hash over the core field, enum and config declarations (the .gpolc schema
  // stamp; plugin declarations are checked by name and type when an artifact is bound).
  uint64_t Hash() const { return hash_; }

  // The declarations of a schema YAML text, nothing else.
  static Schema FromYaml(const std::string& yaml_text, const std::string& origin);
  // A schema file plus torch's built-in filters (BuiltinPlugin(), namespace `builtin`)
  // when the file declares the core fields they read.
  static Schema FromFile(const std::string& path);

 private:
  std::vector<FieldInfo> fields_;
  std::vector<EnumInfo> enums_;
  std::vector<ConfigKnob> config_;
  std::vector<std::string> stances_;
  std::vector<std::string> violation_actions_;
  std::vector<std::string> dispatch_modes_;
  std::vector<std::string> watch_kept_guard_types_;
  std::vector<FunctionInfo> functions_;
  std::vector<std::shared_ptr<const Plugin>> plugins_;
  std::unordered_map<std::string, int> field_index_;
  uint64_t hash_ = 0;
};

}  // namespace guardpolicy
