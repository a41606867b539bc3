// _core.cpp: the pybind11 module guardpolicy._core.
//
// Exposes loading (source -> CompiledPolicy, policy/py_policy.h), evaluation on
// GuardFilterEntry lists (the guard_filter_fn contract: a list of exactly `bool`, same length),
// explain, lint, the filter registry and plugins of a data directory (module/data_dirs.h,
// module/plugins.h), the rows of a snapshot (entry_rows: policy/snapshot_rows.h, the VM's own
// entry reader) and the per-call types (runtime/). The command line is guardpolicy._cli
// (tools/cli/python_module.cpp). Errors in policies raise guardpolicy.errors.PolicyError with
// every diagnostic (policy/py_values.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "guardpolicy/artifact.h"
#include "guardpolicy/keywords.h"
#include "guardpolicy/policy.h"
#include "guardpolicy/registry.h"
#include "module/data_dirs.h"
#include "module/files.h"
#include "module/plugins.h"
#include "policy/extractor_plan.h"
#include "policy/py_policy.h"
#include "policy/py_values.h"
#include "policy/snapshot_rows.h"
#include "policy/source_path.h"
#include "runtime/call_layer.h"
#include "runtime/watch/watch_gate.h"

namespace py = pybind11;

namespace guardpolicy::python {
namespace {

PyPolicy LoadPolicy(const std::string& text, const py::bytes& raw_path, bool from_file,
                    const std::string& name, const py::dict& params, const std::string& data_dir) {
  const std::string path = raw_path;
  ParamValues values = ParamValuesFromPython(params);
  auto schema = SchemaFor(data_dir);
  try {
    Loader loader(schema, data_dir + "/std");
    auto policy = from_file ? loader.LoadFile(path, name, values)
                            : loader.Load(std::make_shared<const SourceFile>(path, text), name, values);
    RegistryFor(data_dir).AddPolicy(policy);
    return PyPolicy(policy, schema);
  } catch (const PolicyError& e) {
    RaisePolicyError(e.diagnostics());
  }
}

py::list Filters(const std::string& data_dir) {
  py::list out;
  for (const FilterInfo& f : RegistryFor(data_dir).List()) {
    py::list params;
    for (const FilterParamInfo& p : f.params) {
      params.append(py::make_tuple(p.name, SchemaFor(data_dir)->TypeName(p.type),
                                   p.default_value ? LiteralToPython(*p.default_value) : py::object(py::none()),
                                   p.default_value.has_value()));
    }
    out.append(py::dict(py::arg("name") = f.name, py::arg("kind") = FilterKindName(f.kind), py::arg("doc") = f.doc,
                        py::arg("params") = params, py::arg("origin") = FsStr(f.origin)));
  }
  return out;
}

PyPolicy GetFilter(const std::string& name, const py::dict& params, const std::string& data_dir) {
  ParamValues values = ParamValuesFromPython(params);
  try {
    return PyPolicy(RegistryFor(data_dir).Get(name, values), SchemaFor(data_dir));
  } catch (const PolicyError& e) {
    RaisePolicyError(e.diagnostics());
  }
}

py::list Lint(const std::string& text, const py::bytes& raw_path, bool from_file,
              const std::string& data_dir) {
  const std::string path = raw_path;
  Loader loader(SchemaFor(data_dir), data_dir + "/std");
  Diagnostics diags;
  try {
    SourceFilePtr file = from_file ? SourceFileFromPath(path) : std::make_shared<const SourceFile>(path, text);
    diags = loader.Lint(file).diagnostics;
  } catch (const PolicyError& e) {
    diags = e.diagnostics();
  }
  py::list out;
  for (const Diagnostic& d : diags.items()) out.append(DiagnosticToDict(d));
  return out;
}

}  // namespace
}  // namespace guardpolicy::python

PYBIND11_MODULE(_core, m) {
  m.attr("__version__") = GUARDPOLICY_VERSION;  // CMakeLists.txt project(), as `guardpolicy --version`
  using namespace guardpolicy;
  using namespace guardpolicy::python;
  m.doc() = "guardpolicy native core: parse, check, compile and run guard-filter policies";

  BindCompiledPolicy(m);
  BindPlugins(m);
  m.def("filters", &Filters, py::arg("data_dir"), "the registry: every filter by name");
  m.def("get_filter", &GetFilter, py::arg("name"), py::arg("params"), py::arg("data_dir"),
        "the filter `name` with `params` bound; raises PolicyError");
  m.def("load", &LoadPolicy, py::arg("text"), py::arg("path"), py::arg("from_file"),
        py::arg("policy"), py::arg("params"), py::arg("data_dir"));
  m.def("lint", &Lint, py::arg("text"), py::arg("path"), py::arg("from_file"), py::arg("data_dir"));
  m.def(
      "looks_like_artifact",
      [](const py::bytes& data, const std::string& path) {
        return guardpolicy::LooksLikeArtifact(std::string_view(data), path);
      },
      py::arg("data"), py::arg("path"),
      "whether `data` (a file's bytes) is a .gpolc artifact, cut or whole, rather than policy "
      "source: the test the loader makes (artifact.h)");
  m.def(
      "schema_lists",
      [](const std::string& data_dir) {
        auto schema = SchemaFor(data_dir);
        py::dict out;
        out["stances"] = schema->stances();
        out["violation_actions"] = schema->violation_actions();
        out["dispatch_modes"] = schema->dispatch_modes();
        out["watch_kept_guard_types"] = schema->watch_kept_guard_types();
        return out;
      },
      py::arg("data_dir"),
      "the schema's runtime lists (stances, violation_actions, dispatch_modes, watch_kept_guard_types), in "
      "schema order");
  m.def("schema_fields", &SchemaFieldNames,
        "the schema's fields in schema order, as the binding reads them (its field table is "
        "generated from policies/schema/guard_entry.yaml at build time)");
  m.def(
      "source_paths",
      [](py::handle source) {
        SourcePaths walker;
        SourcePaths::Paths p = walker.Of(source);
        return py::make_tuple(p.path, p.module_path);
      },
      py::arg("source"),
      "(path, module_path) of a guard's originating source, as the binding reads the fields "
      "`path` and `module_path` (docs/schema.md, \"Real names\")");
  m.def(
      "entry_rows",
      [](py::handle entries, const std::string& data_dir) { return SnapshotRows(entries, SchemaFor(data_dir)); },
      py::arg("entries"), py::arg("data_dir"),
      "one row per GuardFilterEntry: {schema field: bool | int | str | list[str]} in schema order, "
      "each field read as a policy reads it (the VM's entry extractor)");
  m.def("keywords", [] { return Keywords(); }, "the language's keywords, from the lexer generated from the grammar");
  BindFiles(m);
  BindCallLayer(m);
  BindWatchGate(m);
}
