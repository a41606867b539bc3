// registry.h: every guard filter by name, in one place.
//
// Four kinds of entries:
//   builtin  `builtin.<name>`: torch's six torch.compiler.*_unsafe filters, native
//            (core/src/plugin/builtin_filters.cpp), always in a schema read with Schema::FromFile;
//   std      `<name>`: the same six written in the language (<std_dir>/<name>.gpol);
//   plugin   `<plugin>.<filter>`: a filter of a plugin in the schema (Schema::WithPlugin);
//   policy   `<name>`: a compiled policy registered with AddPolicy, while it is alive.
// Get() returns each as a CompiledPolicy: a std policy or a registered one as it is, a
// builtin or plugin filter compiled from `unsafe policy <name> { use <filter>(<params>) }`,
// so explain() names the filter. Not thread-safe (one per thread, or a lock around it).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "guardpolicy/policy.h"

namespace guardpolicy {

struct FilterParamInfo {
  std::string name;
  Type type;
  std::optional<Literal> default_value;
};

struct FilterInfo {
  enum class Kind : uint8_t { kBuiltin, kStd, kPlugin, kPolicy };
  std::string name;
  Kind kind = Kind::kBuiltin;
  std::string doc;
  std::vector<FilterParamInfo> params;
  std::string origin;  // the plugin file ("builtin"), or the policy file
};
const char* FilterKindName(FilterInfo::Kind kind);

class Registry {
 public:
  Registry(std::shared_ptr<const Schema> schema, std::string std_dir);
  // A schema with more plugins (Schema::WithPlugin); registered policies stay listed.
  void SetSchema(std::shared_ptr<const Schema> schema);

  // Lists `policy` under its name while it is alive (a later one of the same name wins).
  void AddPolicy(const std::shared_ptr<const CompiledPolicy>& policy);

  // Every filter: builtin, std, plugin, then registered policies, each group by name.
  std::vector<FilterInfo> List();

  // The filter `name` with `params` bound. Throws PolicyError (GP4001 for an unknown name,
  // with a did-you-mean; GP4002 for a bad parameter).
  std::shared_ptr<const CompiledPolicy> Get(const std::string& name, const ParamValues& params);

  const Schema& schema() const { return *schema_; }

 private:
  std::vector<std::string> StdNames() const;

  std::shared_ptr<const Schema> schema_;
  std::string std_dir_;
  std::map<std::string, std::weak_ptr<const CompiledPolicy>> policies_;
};

}  // namespace guardpolicy
