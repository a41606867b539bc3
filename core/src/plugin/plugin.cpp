// plugin.cpp: the host adapter: the ABI version check, the plugin's table and calls into it.
#include "guardpolicy/plugin.h"

#include <algorithm>

#include <cstddef>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <re2/re2.h>

#include "guardpolicy/keywords.h"
#include "guardpolicy/source.h"

namespace guardpolicy {
namespace {

// The size of a 1.0 table: the host reads nothing past it from a 1.0 plugin.
constexpr size_t kMinTableSize = offsetof(gp_plugin_api, num_filters) + sizeof(uint32_t);

std::string Str(const char* s) { return s ? std::string(s) : std::string(); }

constexpr size_t kMaxNameBytes = 64;
constexpr size_t kMaxTextBytes = 1024;  // docs, versions, string defaults
constexpr uint32_t kMaxArgs = 16;       // function arguments and filter parameters
constexpr uint32_t kMaxDeclarations = 1024;

bool ValidName(const char* s) {
  static const re2::RE2 kName("[a-z_][a-z0-9_]*");
  return s != nullptr && std::strlen(s) <= kMaxNameBytes && re2::RE2::FullMatch(s, kName) && !IsKeyword(s);
}

// "" when `s` is printable UTF-8 text of at most kMaxTextBytes, else what is wrong.
std::string TextProblem(std::string_view s) {
  if (s.size() > kMaxTextBytes) return fmt::format("is {} bytes, over the limit of {}", s.size(), kMaxTextBytes);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return fmt::format("holds the control character 0x{:02x}", c);
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return fmt::format("is not UTF-8 (byte {})", i);
    i += len;
  }
  return {};
}

std::vector<std::string> NullTerminated(const char* const* list) {
  std::vector<std::string> out;
  for (size_t i = 0; list != nullptr && list[i] != nullptr && i < 256; ++i) out.emplace_back(list[i]);
  return out;
}

}  // namespace

Literal DefaultLiteral(const PluginParam& p) {
  Literal lit;
  if (p.type == "bool") {
    lit.kind = Literal::Kind::kBool;
    lit.b = p.default_int != 0;
  } else if (p.type == "int") {
    lit.kind = Literal::Kind::kInt;
    lit.i = p.default_int;
  } else {
    lit.kind = Literal::Kind::kString;
    lit.str = p.default_string;
  }
  return lit;
}

gp_entry_view HostStrings::View(const gp_value* fields, uint32_t num_fields, void* py_entry) {
  gp_entry_view v{};
  v.struct_size = sizeof(gp_entry_view);
  v.fields = fields;
  v.num_fields = num_fields;
  v.py_entry = py_entry;
  v.host = this;
  v.keep_string = &HostStrings::KeepThunk;
  return v;
}

const char* HostStrings::KeepThunk(void* host, const char* str, size_t len) noexcept {
  try {
    return static_cast<HostStrings*>(host)->strings_.emplace_front(str ? str : "", str ? len : 0).data();
  } catch (...) {
    return nullptr;
  }
}

std::shared_ptr<const Plugin> Plugin::FromTable(const gp_plugin_api* api, const std::string& origin,
                                                const std::string& config, std::shared_ptr<void> library) {
  std::shared_ptr<Plugin> p(new Plugin());
  p->library_ = std::move(library);
  p->origin_ = origin;
  p->ReadTable(api);
  p->Init(config);
  return p;
}

Plugin::~Plugin() {
  if (initialized_ && api_.destroy && state_) api_.destroy(state_);
}

void Plugin::ReadTable(const gp_plugin_api* api) {
  auto bad = [&](const std::string& why) { throw PluginError(fmt::format("{}: {}", origin_, why)); };
  if (api == nullptr) bad(fmt::format("`{}` returned no table", GP_PLUGIN_ENTRY_POINT));
  if (api->api_version_major != GP_PLUGIN_API_VERSION_MAJOR || api->api_version_minor > GP_PLUGIN_API_VERSION_MINOR) {
    bad(fmt::format("plugin ABI {}.{} is not supported by this guardpolicy (ABI {}.{}: the major must be equal "
                    "and the minor not newer); rebuild the plugin against this plugin_api.h",
                    api->api_version_major, api->api_version_minor, GP_PLUGIN_API_VERSION_MAJOR,
                    GP_PLUGIN_API_VERSION_MINOR));
  }
  if (api->struct_size < kMinTableSize) {
    bad(fmt::format("the plugin table is {} bytes, smaller than an ABI 1.0 table ({} bytes)", api->struct_size,
                    kMinTableSize));
  }
  std::memcpy(&api_, api, std::min<size_t>(api->struct_size, sizeof(api_)));
  if (!ValidName(api_.name)) {
    bad(fmt::format("plugin name `{}` is not [a-z_][a-z0-9_]* (at most {} bytes, not a keyword)", Str(api_.name),
                    kMaxNameBytes));
  }
  name_ = api_.name;
  if (api_.version == nullptr) bad(fmt::format("plugin `{}` declares no version", name_));
  if (api_.get_last_error == nullptr) bad(fmt::format("plugin `{}` has no get_last_error", name_));
  version_ = api_.version;
  description_ = Str(api_.description);
  auto text = [&](const char* what, const std::string& value) {
    if (std::string problem = TextProblem(value); !problem.empty()) {
      bad(fmt::format("plugin `{}`: {} {}", name_, what, problem));
    }
  };
  text("version", version_);
  text("description", description_);
  if (api_.num_fields > kMaxDeclarations || api_.num_functions > kMaxDeclarations ||
      api_.num_filters > kMaxDeclarations) {
    bad(fmt::format("plugin `{}` declares over {} fields, functions or filters", name_, kMaxDeclarations));
  }

  std::set<std::string> names;
  auto declare = [&](const char* kind, const char* n) {
    if (!ValidName(n)) {
      bad(fmt::format("plugin `{}`: {} name `{}` is not [a-z_][a-z0-9_]* (at most {} bytes, not a keyword)", name_,
                      kind, Str(n), kMaxNameBytes));
    }
    if (!names.insert(n).second) bad(fmt::format("plugin `{}` declares `{}` twice", name_, n));
  };
  auto need = [&](bool ok, const char* kind, const char* n, const char* what) {
    if (!ok) bad(fmt::format("plugin `{}`: {} `{}` has no {}", name_, kind, Str(n), what));
  };
  if ((api_.num_fields && !api_.fields) || (api_.num_functions && !api_.functions) ||
      (api_.num_filters && !api_.filters)) {
    bad(fmt::format("plugin `{}`: a declaration count is not 0 but its array is NULL", name_));
  }
  for (uint32_t i = 0; i < api_.num_fields; ++i) {
    const gp_field_decl& d = api_.fields[i];
    declare("field", d.name);
    need(d.type != nullptr, "field", d.name, "type");
    need(d.extract != nullptr, "field", d.name, "extract callback");
    text("field doc", Str(d.doc));
    fields_.push_back({d.name, d.type, Str(d.doc), NullTerminated(d.reads), d.needs_py_entry != 0});
  }
  for (uint32_t i = 0; i < api_.num_functions; ++i) {
    const gp_function_decl& d = api_.functions[i];
    declare("function", d.name);
    need(d.result_type != nullptr, "function", d.name, "result type");
    need(d.call != nullptr, "function", d.name, "call callback");
    need(d.num_args == 0 || d.arg_types != nullptr, "function", d.name, "argument types");
    if (d.num_args > kMaxArgs) bad(fmt::format("plugin `{}`: function `{}` has {} arguments, over the limit of {}", name_, d.name, d.num_args, kMaxArgs));
    text("function doc", Str(d.doc));
    PluginFunction f{d.name, d.result_type, Str(d.doc), {}};
    for (uint32_t k = 0; k < d.num_args; ++k) {
      need(d.arg_types[k] != nullptr, "function", d.name, "type for every argument");
      f.arg_types.emplace_back(d.arg_types[k]);
    }
    functions_.push_back(std::move(f));
  }
  for (uint32_t i = 0; i < api_.num_filters; ++i) {
    const gp_filter_decl& d = api_.filters[i];
    declare("filter", d.name);
    need(d.run != nullptr, "filter", d.name, "run callback");
    need(d.num_params == 0 || d.params != nullptr, "filter", d.name, "parameter array");
    if (d.num_params > kMaxArgs) bad(fmt::format("plugin `{}`: filter `{}` has {} parameters, over the limit of {}", name_, d.name, d.num_params, kMaxArgs));
    text("filter doc", Str(d.doc));
    PluginFilter f{d.name, Str(d.doc), {}, NullTerminated(d.reads), d.needs_py_entry != 0};
    std::set<std::string> params;
    for (uint32_t k = 0; k < d.num_params; ++k) {
      const gp_param_decl& pd = d.params[k];
      if (!ValidName(pd.name) || !params.insert(pd.name).second) {
        bad(fmt::format("plugin `{}`: filter `{}`: parameter name `{}` is invalid or repeated", name_, d.name, Str(pd.name)));
      }
      need(pd.type != nullptr, "filter parameter", pd.name, "type");
      PluginParam p{pd.name, pd.type, pd.has_default != 0, pd.default_value.i, {}};
      if (p.has_default && pd.default_value.str) {
        p.default_string.assign(pd.default_value.str, std::min<size_t>(pd.default_value.len, kMaxTextBytes + 1));
        text("filter parameter default", p.default_string);
      }
      f.params.push_back(std::move(p));
    }
    filters_.push_back(std::move(f));
  }
}

void Plugin::Init(const std::string& config) {
  if (api_.init == nullptr) {
    initialized_ = true;
    return;
  }
  gp_rc rc = GP_ERROR;
  void* state = api_.init(config.c_str(), &rc);
  if (rc != GP_OK) {
    const char* why = api_.get_last_error(state);
    const std::string message = Str(why);
    if (state && api_.destroy) api_.destroy(state);
    throw PluginError(fmt::format("{}: plugin `{}` failed to initialize: {}", origin_, name_,
                                  message.empty() ? "no reason given" : message));
  }
  state_ = state;
  initialized_ = true;
}

void Plugin::Fail(const std::string& what) const {
  const std::string message = Str(api_.get_last_error(state_));
  throw PluginError(fmt::format("{}: plugin `{}`: {}: {}", origin_, name_, what,
                                message.empty() ? "failed without a message" : message));
}

void Plugin::Extract(size_t index, const gp_entry_view& entry, gp_value& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out = gp_value{};
  if (api_.fields[index].extract(state_, &entry, &out) != GP_OK) {
    Fail(fmt::format("field `{}.{}`", name_, fields_[index].name));
  }
}

gp_value Plugin::Call(size_t index, const gp_value* args, uint32_t num_args) const {
  std::lock_guard<std::mutex> lock(mu_);
  gp_value out{};
  if (api_.functions[index].call(state_, args, num_args, &out) != GP_OK) {
    Fail(fmt::format("function `{}.{}`", name_, functions_[index].name));
  }
  return out;
}

void Plugin::RunFilter(size_t index, const gp_value* params, const gp_entry_view* entries, uint32_t num_entries,
                       uint8_t* keep) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::memset(keep, 1, num_entries);
  if (api_.filters[index].run(state_, params, entries, num_entries, keep) != GP_OK) {
    Fail(fmt::format("filter `{}.{}`", name_, filters_[index].name));
  }
  for (uint32_t i = 0; i < num_entries; ++i) keep[i] = keep[i] != 0;
}

}  // namespace guardpolicy
