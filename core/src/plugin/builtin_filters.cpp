// builtin_filters.cpp: torch's six built-in guard filters (torch/compiler/__init__.py,
// torch 2.8-2.13) as a plugin table under the namespace `builtin`, registered through the
// same ABI as shared-library plugins. Each reads only core fields (see `reads`); decisions
// equal torch's functions entry by entry (tests/python/test_builtin_filters.py):
//   skip_guard_on_inbuilt_nn_modules  keep = not orig_guard.source.is_unspecialized_builtin_nn_module()
//   skip_guard_on_all_nn_modules      keep = not orig_guard.source.is_unspecialized_nn_module()
//   keep_tensor_guards(keep_parameters=False)
//                                     keep = guard_type == "TENSOR_MATCH" and
//                                            (keep_parameters or not isinstance(value, Parameter))
//   skip_guard_on_globals             keep = not is_global
//   skip_all_guards                   keep = False                       (torch 2.10+)
//   keep_portable_guards              keep = guard_type in ("GLOBAL_STATE", "SHAPE_ENV") or
//                                            (guard_type == "TENSOR_MATCH" and not is_global)
#include <string_view>

#include "guardpolicy/builtin_filters.h"

namespace guardpolicy {
namespace {

std::string_view Name(const gp_value& v) { return {v.str ? v.str : "", v.str ? v.len : 0}; }

// Runs `keep(view)` over every entry; never fails.
template <typename KeepFn>
gp_rc Each(const gp_entry_view* entries, uint32_t n, uint8_t* keep, KeepFn fn) {
  for (uint32_t i = 0; i < n; ++i) keep[i] = fn(entries[i].fields) ? 1 : 0;
  return GP_OK;
}

gp_rc InbuiltNNModules(void*, const gp_value*, const gp_entry_view* e, uint32_t n, uint8_t* keep) {
  return Each(e, n, keep, [](const gp_value* f) { return f[0].i == 0; });
}
gp_rc AllNNModules(void*, const gp_value*, const gp_entry_view* e, uint32_t n, uint8_t* keep) {
  return Each(e, n, keep, [](const gp_value* f) { return f[0].i == 0; });
}
gp_rc TensorGuards(void*, const gp_value* params, const gp_entry_view* e, uint32_t n, uint8_t* keep) {
  const bool keep_parameters = params[0].i != 0;
  return Each(e, n, keep, [&](const gp_value* f) {
    return Name(f[0]) == "TENSOR_MATCH" && (keep_parameters || f[1].i == 0);
  });
}
gp_rc Globals(void*, const gp_value*, const gp_entry_view* e, uint32_t n, uint8_t* keep) {
  return Each(e, n, keep, [](const gp_value* f) { return f[0].i == 0; });
}
gp_rc AllGuards(void*, const gp_value*, const gp_entry_view* e, uint32_t n, uint8_t* keep) {
  return Each(e, n, keep, [](const gp_value*) { return false; });
}
gp_rc PortableGuards(void*, const gp_value*, const gp_entry_view* e, uint32_t n, uint8_t* keep) {
  return Each(e, n, keep, [](const gp_value* f) {
    const std::string_view type = Name(f[0]);
    return type == "GLOBAL_STATE" || type == "SHAPE_ENV" || (type == "TENSOR_MATCH" && f[1].i == 0);
  });
}

const char* LastError(void*) { return "the built-in filters do not fail"; }

const char* const kReadsBuiltinModule[] = {"guard_source.is_unspecialized_builtin_nn_module", nullptr};
const char* const kReadsModule[] = {"guard_source.is_unspecialized_nn_module", nullptr};
const char* const kReadsTensor[] = {"guard_type", "value.is_parameter", nullptr};
const char* const kReadsGlobal[] = {"is_global", nullptr};
const char* const kReadsPortable[] = {"guard_type", "is_global", nullptr};

const gp_param_decl kKeepParameters[] = {{"keep_parameters", "bool", 1, gp_value{0, 0, nullptr, 0}}};

const gp_filter_decl kFilters[] = {
    {"skip_guard_on_inbuilt_nn_modules",
     "torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe: drop guards on unspecialized built-in nn modules",
     nullptr, 0, kReadsBuiltinModule, 0, &InbuiltNNModules},
    {"skip_guard_on_all_nn_modules",
     "torch.compiler.skip_guard_on_all_nn_modules_unsafe: drop guards on every unspecialized nn module", nullptr, 0,
     kReadsModule, 0, &AllNNModules},
    {"keep_tensor_guards",
     "torch.compiler.keep_tensor_guards_unsafe: keep only TENSOR_MATCH guards (parameters when keep_parameters)",
     kKeepParameters, 1, kReadsTensor, 0, &TensorGuards},
    {"skip_guard_on_globals", "torch.compiler.skip_guard_on_globals_unsafe: drop guards on globals", nullptr, 0,
     kReadsGlobal, 0, &Globals},
    {"skip_all_guards", "torch.compiler.skip_all_guards_unsafe (torch 2.10+): drop every guard", nullptr, 0,
     nullptr, 0, &AllGuards},
    {"keep_portable_guards",
     "torch.compiler.keep_portable_guards_unsafe: keep GLOBAL_STATE, SHAPE_ENV and non-global TENSOR_MATCH",
     nullptr, 0, kReadsPortable, 0, &PortableGuards},
};

const gp_plugin_api kBuiltinApi = {
    sizeof(gp_plugin_api),
    GP_PLUGIN_API_VERSION_MAJOR,
    GP_PLUGIN_API_VERSION_MINOR,
    "builtin",
    "torch-2.13",
    "torch's built-in guard filters (torch.compiler.*_unsafe), native",
    nullptr,
    nullptr,
    &LastError,
    nullptr,
    0,
    nullptr,
    0,
    kFilters,
    sizeof(kFilters) / sizeof(kFilters[0]),
};

}  // namespace

std::shared_ptr<const Plugin> BuiltinPlugin() {
  static const std::shared_ptr<const Plugin> plugin = Plugin::FromTable(&kBuiltinApi, "builtin");
  return plugin;
}

}  // namespace guardpolicy
