// builtin_filters.h: torch's built-in guard filters as a plugin linked into the host.
#pragma once

#include <memory>

#include "guardpolicy/plugin.h"

namespace guardpolicy {

// The torch built-in filters (torch.compiler.*_unsafe, torch 2.8-2.13), implemented
// natively under the namespace `builtin`: skip_guard_on_inbuilt_nn_modules,
// skip_guard_on_all_nn_modules, keep_tensor_guards(keep_parameters), skip_guard_on_globals,
// skip_all_guards, keep_portable_guards. One shared instance.
std::shared_ptr<const Plugin> BuiltinPlugin();

}  // namespace guardpolicy
