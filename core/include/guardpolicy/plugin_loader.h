// plugin_loader.h: opening a plugin shared library.
//
// LoadPlugin dlopen()s the file (RTLD_LOCAL: plugins do not see each other's symbols),
// finds gp_plugin_get_api and hands its table to Plugin::FromTable. Every failure throws
// PluginError("<file>: <reason>"); nothing is left loaded after a failure.
#pragma once

#include <memory>
#include <string>

#include "guardpolicy/plugin.h"

namespace guardpolicy {

// Loads the shared library at `path` and initializes it with `config`. A bare file name is
// relative to the working directory, never a name for the dynamic linker's search.
std::shared_ptr<const Plugin> LoadPlugin(const std::string& path, const std::string& config = "");

}  // namespace guardpolicy
