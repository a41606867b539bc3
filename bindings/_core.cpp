// _core.cpp: the pybind11 module guardpolicy._core.
//
// Exposes loading (source -> CompiledPolicy), evaluation on GuardFilterEntry lists (the
// guard_filter_fn contract: a list of exactly `bool`, same length), explain, lint, and the
// rows of a snapshot (entry_rows: snapshot_rows.h, the VM's own entry reader). The command
// line is guardpolicy._cli (tools/cli/python_module.cpp). Errors in policies raise
// guardpolicy.errors.PolicyError with every diagnostic.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <mutex>

#include "call_layer.h"
#include "watch_gate.h"
#include "entry_extractor.h"
#include "files.h"
#include "guardpolicy/artifact.h"
#include "guardpolicy/keywords.h"
#include "guardpolicy/parser.h"
#include "guardpolicy/plugin.h"
#include "guardpolicy/plugin_loader.h"
#include "guardpolicy/policy.h"
#include "guardpolicy/registry.h"
#include "guardpolicy/vm.h"
#include "snapshot_rows.h"
#include "source_path.h"

namespace py = pybind11;

namespace guardpolicy::python {
namespace {

// Text that may hold file names which are not UTF-8, decoded like the file system does.
py::object FsStr(const std::string& s) {
  PyObject* r = PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

// One Schema per data directory, loaded once, then extended by each loaded plugin (a policy
// keeps the schema it was compiled against).
std::mutex schema_mu;
std::map<std::string, std::shared_ptr<const Schema>>& SchemaCache() {
  static auto* cache = new std::map<std::string, std::shared_ptr<const Schema>>();  // lives with the process
  return *cache;
}

std::shared_ptr<const Schema> SchemaFor(const std::string& data_dir) {
  std::lock_guard<std::mutex> lock(schema_mu);
  auto& slot = SchemaCache()[data_dir];
  if (!slot) slot = std::make_shared<const Schema>(Schema::FromFile(data_dir + "/schema/guard_entry.yaml"));
  return slot;
}

// The filter registry of a data directory (builtin, std, plugin filters, loaded policies).
Registry& RegistryFor(const std::string& data_dir) {
  static auto* registries = new std::map<std::string, std::unique_ptr<Registry>>();  // lives with the process
  std::shared_ptr<const Schema> schema = SchemaFor(data_dir);
  std::lock_guard<std::mutex> lock(schema_mu);
  auto& slot = (*registries)[data_dir];
  if (!slot) slot = std::make_unique<Registry>(schema, data_dir + "/std");
  slot->SetSchema(schema);
  return *slot;
}

py::object LiteralToPython(const Literal& lit);

py::dict PluginInfo(const Plugin& p) {
  py::dict d;
  d["name"] = p.name();
  d["version"] = p.version();
  d["description"] = p.description();
  d["path"] = FsStr(p.origin());
  d["api_version"] = std::to_string(GP_PLUGIN_API_VERSION_MAJOR) + "." + std::to_string(p.api_minor());
  py::list fields, functions, filters;
  for (const PluginField& f : p.fields()) fields.append(py::dict(py::arg("name") = p.name() + "." + f.name, py::arg("type") = f.type, py::arg("doc") = f.doc));
  for (const PluginFunction& f : p.functions()) {
    functions.append(py::dict(py::arg("name") = p.name() + "." + f.name, py::arg("args") = f.arg_types,
                              py::arg("result") = f.result_type, py::arg("doc") = f.doc));
  }
  for (const PluginFilter& f : p.filters()) {
    py::list params;
    for (const PluginParam& prm : f.params) {
      const py::object def = prm.has_default ? LiteralToPython(DefaultLiteral(prm)) : py::object(py::none());
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
py::dict LoadPluginFile(const py::bytes& raw_path, const std::string& config, const std::string& data_dir) {
  const std::string path = raw_path;
  if (path.find('\0') != std::string::npos || config.find('\0') != std::string::npos) {
    throw py::value_error("embedded null byte in the plugin path or config");
  }
  std::shared_ptr<const Schema> base = SchemaFor(data_dir);
  std::shared_ptr<const Plugin> plugin = guardpolicy::LoadPlugin(path, config);
  auto extended = std::make_shared<const Schema>(base->WithPlugin(plugin));
  py::dict info = PluginInfo(*plugin);  // before anything is committed: it may raise
  std::lock_guard<std::mutex> lock(schema_mu);
  SchemaCache()[data_dir] = extended;
  return info;
}

py::list Plugins(const std::string& data_dir) {
  py::list out;
  for (const auto& p : SchemaFor(data_dir)->plugins()) out.append(PluginInfo(*p));
  return out;
}



py::dict DiagnosticToDict(const Diagnostic& d) {
  py::dict out;
  const LineCol start = d.range.start();
  const LineCol end = d.range.file ? d.range.file->Locate(d.range.end) : LineCol{};
  out["severity"] = SeverityName(d.severity);
  out["code"] = d.code;
  out["message"] = FsStr(d.message);
  out["file"] = d.range.file ? FsStr(d.range.file->path()) : py::object(py::none());
  out["line"] = start.line;
  out["column"] = start.col;
  out["end_line"] = end.line;
  out["end_column"] = end.col;
  out["help"] = FsStr(d.help);
  out["rendered"] = FsStr(RenderText(d));
  return out;
}

[[noreturn]] void RaisePolicyError(const Diagnostics& diags) {
  py::list items;
  for (const Diagnostic& d : diags.items()) items.append(DiagnosticToDict(d));
  py::object cls = py::module_::import("guardpolicy.errors").attr("PolicyError");
  PyErr_SetObject(cls.ptr(), cls(FsStr(RenderText(diags)), items).ptr());
  throw py::error_already_set();
}

Literal LiteralFromPython(const std::string& name, py::handle v) {
  Literal lit;
  if (py::isinstance<py::bool_>(v)) {
    lit.kind = Literal::Kind::kBool;
    lit.b = v.cast<bool>();
  } else if (py::isinstance<py::int_>(v)) {
    lit.kind = Literal::Kind::kInt;
    int overflow = 0;
    lit.i = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0) throw py::value_error("parameter `" + name + "`: integer out of the 64-bit range");
  } else if (py::isinstance<py::str>(v)) {
    lit.kind = Literal::Kind::kString;
    lit.str = v.cast<std::string>();
  } else {
    throw py::type_error("parameter `" + name + "` must be bool, int or str, not " +
                         std::string(Py_TYPE(v.ptr())->tp_name));
  }
  return lit;
}

py::object LiteralToPython(const Literal& lit) {
  switch (lit.kind) {
    case Literal::Kind::kBool: return py::bool_(lit.b);
    case Literal::Kind::kInt: return py::int_(lit.i);
    case Literal::Kind::kString: return py::str(lit.str);
  }
  return py::none();
}

// Whether a Python exception raised while reading entries is a failure to read them (an
// Exception: on_error decides) rather than a request to stop (KeyboardInterrupt, SystemExit,
// GeneratorExit and other BaseExceptions, which always propagate).
bool IsEntryFailure(const py::error_already_set& e) { return e.matches(PyExc_Exception); }

// Runs the handlers of signals that arrived while C++ read entries (a Ctrl-C), so that what
// they raise ends the call: between entries, and before e.what() formats a failure (that
// runs Python code, and pybind11 would swallow a KeyboardInterrupt raised there).
void StopOnSignal() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// A compiled policy bound to the schema it was compiled against.
class PyPolicy {
 public:
  PyPolicy(std::shared_ptr<const CompiledPolicy> policy, std::shared_ptr<const Schema> schema)
      : policy_(std::move(policy)),
        schema_(std::move(schema)),
        plan_(std::make_shared<const ExtractorPlan>(policy_->program(), schema_)) {}

  // guard_filter_fn: one exact bool per entry, True = keep (a watch too: torch keeps it).
  py::list Call(py::handle entries) const {
    // Decisions are kept in C++ until the end: a list made up front would be reachable
    // (through the garbage collector) by Python code a field read runs, half filled.
    struct DecisionSink {
      std::vector<uint8_t> keep;
      void Start(size_t n) { keep.resize(n); }
      void Set(size_t i, Outcome o) { keep[i] = KeptByTorch(o.decision); }
    } sink;
    Run(entries, false, false, sink);
    py::list out(sink.keep.size());
    for (size_t i = 0; i < sink.keep.size(); ++i) out[i] = py::bool_(sink.keep[i] != 0);
    return out;
  }

  // [(decision: "keep", "drop" or "watch", rule_index or -1)] per entry.
  std::vector<std::pair<const char*, int>> Explain(py::handle entries, bool from_mappings,
                                                   bool strict) const {
    struct VectorSink {
      std::vector<std::pair<const char*, int>> out;
      void Start(size_t n) { out.resize(n); }
      void Set(size_t i, Outcome o) { out[i] = {DecisionName(o.decision), o.rule}; }
    } sink;
    Run(entries, from_mappings, strict, sink);
    return std::move(sink.out);
  }

  const CompiledPolicy& policy() const { return *policy_; }
  const std::shared_ptr<const Schema>& schema() const { return schema_; }

 private:
  // Evaluates every entry into sink.Set(i, outcome) after sink.Start(n). An entry the
  // binding cannot read gets the policy's on_error decision (keep by default; `raise`
  // re-raises); the others are decided as usual. `strict` (evaluate) raises on an
  // unreadable row instead.
  template <class Sink>
  void Run(py::handle entries, bool from_mappings, bool strict, Sink& sink) const {
    const Program& prog = policy_->program();
    // A snapshot of the entries: Python code run while reading them cannot change the list.
    py::tuple items = py::reinterpret_steal<py::tuple>(PySequence_Tuple(entries.ptr()));
    if (!items) throw py::error_already_set();
    const size_t n = items.size();
    const Outcome on_error{policy_->on_error() == OnError::kDrop ? Decision::kDrop : Decision::kKeep, -1};
    sink.Start(n);
    // The extractor of the last call, reset, or a new one (a call running meanwhile, from
    // another thread or from Python code a field ran, has taken it). Swapped under the GIL.
    std::unique_ptr<EntryExtractor> owned = std::move(spare_extractor_);
    if (!owned) owned = std::make_unique<EntryExtractor>(*plan_);
    EntryExtractor& extractor = *owned;
    extractor.SetMappings(from_mappings);
    LazyEntryView lazy(extractor);
    const bool raise = strict || policy_->on_error() == guardpolicy::OnError::kRaise;
    std::string first_failure;
    size_t failures = 0;
    auto fail = [&](const char* what, size_t count) {
      if (failures == 0) first_failure = what;
      failures += count;
    };
    // Filters see the whole list at once, before any entry is decided.
    bool filters_ok = true;
    if (plan_->has_filters) {
      try {
        extractor.RunFilters(items, from_mappings);
      } catch (py::error_already_set& e) {
        if (raise || !IsEntryFailure(e)) throw;
        StopOnSignal();
        fail(e.what(), n);
        filters_ok = false;
      } catch (const std::exception& e) {
        if (raise) throw;
        fail(e.what(), n);
        filters_ok = false;
      }
    }
    for (size_t i = 0; i < n && filters_ok; ++i) {
      StopOnSignal();
      py::handle entry = items[i];
      Outcome outcome = on_error;
      try {
        lazy.Reset(entry, i);
        outcome = EvaluateView(prog, lazy);
      } catch (py::error_already_set& e) {
        if (raise || !IsEntryFailure(e)) throw;
        StopOnSignal();
        fail(e.what(), 1);
      } catch (const PluginError& e) {
        if (raise) throw;
        fail(e.what(), 1);
      } catch (const std::exception& e) {  // e.g. pybind11::cast_error on a wrong attribute type
        if (raise) throw py::type_error(std::string("entry ") + std::to_string(i) + ": " + e.what());
        fail(e.what(), 1);
      }
      sink.Set(i, outcome);
    }
    if (!filters_ok) {
      for (size_t i = 0; i < n; ++i) sink.Set(i, on_error);
    }
    extractor.Reset();
    spare_extractor_ = std::move(owned);
    if (failures > 0) {
      py::module_::import("guardpolicy.errors")
          .attr("warn_internal_failure")(policy_->name(), first_failure, OnErrorName(policy_->on_error()),
                                         failures, n);
    }
  }

  std::shared_ptr<const CompiledPolicy> policy_;
  std::shared_ptr<const Schema> schema_;
  std::shared_ptr<const ExtractorPlan> plan_;  // shared by every call (and thread)
  mutable std::unique_ptr<EntryExtractor> spare_extractor_;  // reused by the next call (GIL)
};

PyPolicy LoadPolicy(const std::string& text, const py::bytes& raw_path, bool from_file,
                    const std::string& name, const py::dict& params, const std::string& data_dir) {
  const std::string path = raw_path;
  ParamValues values;
  for (auto [k, v] : params) values[k.cast<std::string>()] = LiteralFromPython(k.cast<std::string>(), v);
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
  ParamValues values;
  for (auto [k, v] : params) values[k.cast<std::string>()] = LiteralFromPython(k.cast<std::string>(), v);
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

py::list RuleTable(const PyPolicy& p) {
  py::list rules;
  for (const RuleInfo& r : p.policy().program().image().rules) {
    py::dict d;
    d["policy"] = r.policy;
    d["file"] = r.file;
    d["line"] = r.line;
    d["column"] = r.col;
    d["decision"] = DecisionName(r.decision);
    rules.append(d);
  }
  return rules;
}

// A runtime line (runtime_settings.h) as Python sees it in `runtime_settings`; None when the
// policy has no such line.
py::object SettingToPython(const std::vector<ConfigSetting>& config) {
  py::dict d;
  for (const ConfigSetting& c : config) d[py::str(c.knob)] = LiteralToPython(c.value);
  return d;
}
py::object SettingToPython(const std::optional<StanceSetting>& s) {
  return s ? py::object(py::make_tuple(s->stance, s->after_calls)) : py::object(py::none());
}
py::object SettingToPython(const std::optional<VerifySetting>& v) {
  return v ? py::object(py::int_(v->every_calls)) : py::object(py::none());
}
py::object SettingToPython(const std::optional<OnViolationSetting>& a) {
  return a ? py::object(py::str(a->action)) : py::object(py::none());
}
py::object SettingToPython(const std::optional<DispatchSetting>& d) {
  return d ? py::object(py::str(d->mode)) : py::object(py::none());
}
py::object SettingToPython(const std::optional<OnErrorSetting>& e) {
  return e ? py::object(py::str(OnErrorName(e->action))) : py::object(py::none());
}

// Every runtime line by name, as written (no defaults filled in).
py::dict RuntimeSettingsDict(const PyPolicy& p) {
  py::dict d;
  VisitRuntimeSettings(p.policy().runtime(), [&](const char* name, const auto& setting) {
    d[py::str(name)] = SettingToPython(setting);
  });
  return d;
}

// The schema's first violation action (its default), or None.
py::object DefaultAction(const PyPolicy& p) {
  const auto& actions = p.schema()->violation_actions();
  return actions.empty() ? py::object(py::none()) : py::object(py::str(actions.front()));
}

}  // namespace
}  // namespace guardpolicy::python

PYBIND11_MODULE(_core, m) {
  m.attr("__version__") = GUARDPOLICY_VERSION;  // CMakeLists.txt project(), as `guardpolicy --version`
  using namespace guardpolicy;
  using namespace guardpolicy::python;
  m.doc() = "guardpolicy native core: parse, check, compile and run guard-filter policies";

  py::class_<PyPolicy>(m, "CompiledPolicy")
      .def("__call__", &PyPolicy::Call, py::arg("entries"),
           "guard_filter_fn: list[GuardFilterEntry] -> list[bool] (True = keep), same length")
      .def("explain", &PyPolicy::Explain, py::arg("entries"), py::arg("from_mappings") = false,
           py::arg("strict") = false,
           "[(decision: 'keep', 'drop' or 'watch', rule index or -1 for the default)] per entry")
      .def_property_readonly("name", [](const PyPolicy& p) { return p.policy().name(); })
      .def_property_readonly("doc", [](const PyPolicy& p) { return p.policy().doc(); })
      .def_property_readonly("is_unsafe", [](const PyPolicy& p) { return p.policy().is_unsafe(); })
      .def_property_readonly("fields",
                             [](const PyPolicy& p) { return p.policy().program().image().fields; })
      .def_property_readonly("rules", &RuleTable)
      .def_property_readonly(
          "default_decision",
          [](const PyPolicy& p) {
            return std::string(DecisionName(p.policy().program().image().default_decision));
          })
      .def_property_readonly(
          "on_error",
          [](const PyPolicy& p) { return std::string(OnErrorName(p.policy().on_error())); })
      .def_property_readonly(
          "config", [](const PyPolicy& p) { return SettingToPython(p.policy().runtime().config); })
      .def_property_readonly("params",
                             [](const PyPolicy& p) {
                               py::dict d;
                               for (const auto& [k, v] : p.policy().meta().params)
                                 d[py::str(k)] = LiteralToPython(v);
                               return d;
                             })
      .def_property_readonly(
          "source_file",
          [](const PyPolicy& p) { return FsStr(p.policy().program().image().default_file); })
      .def_property_readonly("runtime_settings", &RuntimeSettingsDict)
      .def_property_readonly(
          "stance", [](const PyPolicy& p) { return SettingToPython(p.policy().runtime().stance); })
      .def_property_readonly("verify",
                             [](const PyPolicy& p) -> py::object {
                               const RuntimeSettings& rt = p.policy().runtime();
                               if (!rt.verify) return py::none();
                               if (rt.on_violation)
                                 return py::make_tuple(rt.verify->every_calls,
                                                       rt.on_violation->action);
                               return py::make_tuple(rt.verify->every_calls, DefaultAction(p));
                             })
      .def_property_readonly("on_recompile",
                             [](const PyPolicy& p) -> py::object {
                               const RuntimeSettings& rt = p.policy().runtime();
                               if (rt.on_recompile) return py::str(rt.on_recompile->action);
                               return rt.stance ? DefaultAction(p) : py::object(py::none());
                             })
      .def_property_readonly(
          "dispatch",
          [](const PyPolicy& p) { return SettingToPython(p.policy().runtime().dispatch); })
      .def("disassemble",
           [](const PyPolicy& p) { return Disassemble(p.policy().program().image(), *p.schema()); })
      .def("serialize",
           [](const PyPolicy& p) { return py::bytes(SerializePolicy(p.policy(), *p.schema())); });

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
