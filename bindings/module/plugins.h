// plugins.h: guardpolicy._core's plugin functions: load_plugin (a plugin shared library into
// a data directory's schema, data_dirs.h) and plugins (what is loaded, as dicts), and the
// translation of PluginError (from a load or from a policy's call) to
// guardpolicy.errors.PluginError.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// Registers the PluginError translator and adds load_plugin and plugins to `m`.
void BindPlugins(pybind11::module_& m);

}  // namespace guardpolicy::python
