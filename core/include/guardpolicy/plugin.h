// plugin.h: the host adapter, a plugin's table (plugins/include/guardpolicy/plugin_api.h) as
// the host sees it. The schema, the VM and the bindings know plugins only through this.
//
// Plugin::FromTable checks the ABI version (major equal, minor not newer than the host's),
// copies and checks the declarations that need no schema (names, required callbacks,
// counts), then calls init. The checks that need the schema (types, `reads`, clashes with
// schema names or other plugins) are made by Schema::WithPlugin. Every failure throws
// PluginError("<origin>: <reason>"). Shared libraries are opened by the loader
// (plugin_loader.h); torch's built-in filters are a table linked in (builtin_filters.h).
//
// Calls into a plugin (Extract, Call, RunFilter) are serialized by a lock per plugin and
// throw PluginError carrying the plugin's get_last_error text when the callback fails.
// Plugin objects are immutable otherwise; the library stays loaded while any shared_ptr
// to its Plugin lives (Schema and Program hold them).
#pragma once

#include <cstdint>
#include <forward_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "guardpolicy/literal.h"
#include "guardpolicy/plugin_api.h"

namespace guardpolicy {

class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Storage behind gp_entry_view.keep_string for one host call. Not thread-safe.
class HostStrings {
 public:
  // A view of one entry: `fields` are the declaration's `reads`, in order; `py_entry` is a
  // borrowed PyObject* or null.
  gp_entry_view View(const gp_value* fields, uint32_t num_fields, void* py_entry);
  std::string_view Keep(std::string_view s) { return strings_.emplace_front(s); }
  void Clear() { strings_.clear(); }

 private:
  static const char* KeepThunk(void* host, const char* str, size_t len) noexcept;
  std::forward_list<std::string> strings_;  // stable addresses; allocates nothing while empty
};

// Declarations copied out of the plugin's table (names unqualified, as the plugin wrote).
struct PluginField {
  std::string name, type, doc;
  std::vector<std::string> reads;
  bool needs_py_entry = false;
};
struct PluginFunction {
  std::string name, result_type, doc;
  std::vector<std::string> arg_types;
};
struct PluginParam {
  std::string name, type;
  bool has_default = false;
  int64_t default_int = 0;      // bool (0/1) and int defaults
  std::string default_string;   // string defaults
};
struct PluginFilter {
  std::string name, doc;
  std::vector<PluginParam> params;
  std::vector<std::string> reads;
  bool needs_py_entry = false;
};

class Plugin {
 public:
  // The plugin behind `api`, initialized with `config`; `origin` (its file, or "builtin")
  // names it in errors. `library` keeps the code behind the table loaded while the plugin
  // lives (null for a table linked into this process: the built-ins, tests).
  static std::shared_ptr<const Plugin> FromTable(const gp_plugin_api* api, const std::string& origin,
                                                 const std::string& config = "",
                                                 std::shared_ptr<void> library = nullptr);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const std::string& name() const { return name_; }  // the namespace
  const std::string& version() const { return version_; }
  const std::string& description() const { return description_; }
  const std::string& origin() const { return origin_; }  // the file, or "builtin"
  uint32_t api_minor() const { return api_.api_version_minor; }
  const std::vector<PluginField>& fields() const { return fields_; }
  const std::vector<PluginFunction>& functions() const { return functions_; }
  const std::vector<PluginFilter>& filters() const { return filters_; }

  // Field `index`'s value for one entry. Throws PluginError.
  void Extract(size_t index, const gp_entry_view& entry, gp_value& out) const;
  // Function `index` on `args`. Throws PluginError.
  gp_value Call(size_t index, const gp_value* args, uint32_t num_args) const;
  // Filter `index` over `entries`; keep[i] is 1 or 0 afterwards. Throws PluginError.
  void RunFilter(size_t index, const gp_value* params, const gp_entry_view* entries, uint32_t num_entries,
                 uint8_t* keep) const;

 private:
  Plugin() = default;
  void ReadTable(const gp_plugin_api* api);
  void Init(const std::string& config);
  [[noreturn]] void Fail(const std::string& what) const;  // with get_last_error

  std::shared_ptr<void> library_;  // released after the destructor's `destroy` call
  gp_plugin_api api_{};  // the plugin's table, zero past its struct_size
  void* state_ = nullptr;
  bool initialized_ = false;
  std::string origin_, name_, version_, description_;
  std::vector<PluginField> fields_;
  std::vector<PluginFunction> functions_;
  std::vector<PluginFilter> filters_;
  mutable std::mutex mu_;
};

// A filter parameter's default as a literal of its type (`p.has_default` must hold).
Literal DefaultLiteral(const PluginParam& p);

}  // namespace guardpolicy
