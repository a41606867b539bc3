// loader.cpp: a plugin shared library opened with dlopen and handed to the host adapter.
#include "guardpolicy/plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include "guardpolicy/file_io.h"

namespace guardpolicy {

std::shared_ptr<const Plugin> LoadPlugin(const std::string& path_in, const std::string& config) {
  if (path_in.empty()) throw PluginError("cannot load a plugin from an empty path");
  if (path_in.find('\0') != std::string::npos) throw PluginError("a plugin path holds a NUL byte");
  // A file, never a name for the dynamic linker's search ("libz.so.1" would find the
  // system's library): a bare file name is relative to the working directory.
  const std::string path = path_in.find('/') == std::string::npos ? "./" + path_in : path_in;
  // dlopen would block forever on a FIFO and read a device: only a regular file is loaded
  // (a missing one is dlopen's to report).
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    const std::string kind = NonRegularKind(st.st_mode);
    throw PluginError(fmt::format("{}: cannot load the plugin: it is {}, not a regular file", path, kind));
  }
  // RTLD_LOCAL: plugins do not see each other's symbols.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw PluginError(fmt::format("{}: cannot load the plugin: {}", path, why ? why : "dlopen failed"));
  }
  // Closed when the last holder lets go: this function on a failure, else the Plugin.
  std::shared_ptr<void> library(handle, [](void* h) { dlclose(h); });
  dlerror();
  void* sym = dlsym(handle, GP_PLUGIN_ENTRY_POINT);
  if (sym == nullptr) {
    throw PluginError(fmt::format("{}: not a guardpolicy plugin: no `{}` symbol", path, GP_PLUGIN_ENTRY_POINT));
  }
  const gp_plugin_api* api = reinterpret_cast<gp_plugin_get_api_fn>(sym)();
  return Plugin::FromTable(api, path, config, std::move(library));
}

}  // namespace guardpolicy
