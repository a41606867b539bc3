// plugins.cpp: load_plugin, plugins and the PluginError translator (see plugins.h).
#include "plugins.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "data_dirs.h"
#include "guardpolicy/plugin.h"
#include "guardpolicy/plugin_loader.h"
#include "policy/py_values.h"

namespace py = pybind11;

namespace guardpolicy::python {
namespace {

py::dict PluginInfo(const Plugin& p) {
  py::dict d;
  d["name"] = p.name();
  d["version"] = p.version();
  d["description"] = p.description();
  d["path"] = FsStr(p.origin());
  d["api_version"] =
      std::to_string(GP_PLUGIN_API_VERSION_MAJOR) + "." + std::to_string(p.api_minor());
  py::list fields, functions, filters;
  for (const PluginField& f : p.fields()) {
    fields.append(py::dict(py::arg("name") = p.name() + "." + f.name, py::arg("type") = f.type,
                           py::arg("doc") = f.doc));
  }
  for (const PluginFunction& f : p.functions()) {
    functions.append(py::dict(py::arg("name") = p.name() + "." + f.name,
                              py::arg("args") = f.arg_types, py::arg("result") = f.result_type,
                              py::arg("doc") = f.doc));
  }
  for (const PluginFilter& f : p.filters()) {
    py::list params;
    for (const PluginParam& prm : f.params) {
      const py::object def =
          prm.has_default ? LiteralToPython(DefaultLiteral(prm)) : py::object(py::none());
      params.append(py::make_tuple(prm.name, prm.type, def, prm.has_default));
    }
    filters.append(py::dict(py::arg("name") = p.name() + "." + f.name, py::arg("doc") = f.doc,
                            py::arg("params") = params));
  }
  d["fields"] = fields;
  d["functions"] = functions;
  d["filters"] = filters;
  return d;
}

// Loads a plugin and makes every later load under `data_dir` see its declarations.
py::dict LoadPluginFile(const py::bytes& raw_path, const std::string& config,
                        const std::string& data_dir) {
  const std::string path = raw_path;
  if (path.find('\0') != std::string::npos || config.find('\0') != std::string::npos) {
    throw py::value_error("embedded null byte in the plugin path or config");
  }
  std::shared_ptr<const Schema> base = SchemaFor(data_dir);
  std::shared_ptr<const Plugin> plugin = guardpolicy::LoadPlugin(path, config);
  auto extended = std::make_shared<const Schema>(base->WithPlugin(plugin));
  py::dict info = PluginInfo(*plugin);  // before anything is committed: it may raise
  ReplaceSchema(data_dir, extended);
  return info;
}

py::list Plugins(const std::string& data_dir) {
  py::list out;
  for (const auto& p : SchemaFor(data_dir)->plugins()) out.append(PluginInfo(*p));
  return out;
}

}  // namespace

void BindPlugins(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PluginError& e) {
      py::object cls = py::module_::import("guardpolicy.errors").attr("PluginError");
      PyErr_SetObject(cls.ptr(), FsStr(e.what()).ptr());
    }
  });
  m.def("load_plugin", &LoadPluginFile, py::arg("path"), py::arg("config"), py::arg("data_dir"),
        "loads a plugin shared library; returns its declarations; raises PluginError");
  m.def("plugins", &Plugins, py::arg("data_dir"), "the loaded plugins (the built-ins first)");
}

}  // namespace guardpolicy::python
