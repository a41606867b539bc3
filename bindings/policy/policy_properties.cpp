// policy_properties.cpp: the type CompiledPolicy as Python sees it (BindCompiledPolicy,
// py_policy.h): __call__ and explain, and the read-only properties: the policy's name,
// rules and parameters, and its runtime lines (runtime_settings.h) as Python values.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "guardpolicy/artifact.h"
#include "guardpolicy/bytecode.h"
#include "guardpolicy/runtime_settings.h"
#include "py_policy.h"
#include "py_values.h"

namespace py = pybind11;

namespace guardpolicy::python {
namespace {

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

// `verify`: (every_calls, on_violation's action or the schema's default), or None.
py::object VerifyTuple(const PyPolicy& p) {
  const RuntimeSettings& rt = p.policy().runtime();
  if (!rt.verify) return py::none();
  if (rt.on_violation) return py::make_tuple(rt.verify->every_calls, rt.on_violation->action);
  return py::make_tuple(rt.verify->every_calls, DefaultAction(p));
}

// `on_recompile`: its action, the schema's default under a `stance` line, else None.
py::object OnRecompile(const PyPolicy& p) {
  const RuntimeSettings& rt = p.policy().runtime();
  if (rt.on_recompile) return py::str(rt.on_recompile->action);
  return rt.stance ? DefaultAction(p) : py::object(py::none());
}

py::dict Params(const PyPolicy& p) {
  py::dict d;
  for (const auto& [k, v] : p.policy().meta().params) d[py::str(k)] = LiteralToPython(v);
  return d;
}

}  // namespace

void BindCompiledPolicy(py::module_& m) {
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
      .def_property_readonly("params", &Params)
      .def_property_readonly(
          "source_file",
          [](const PyPolicy& p) { return FsStr(p.policy().program().image().default_file); })
      .def_property_readonly("runtime_settings", &RuntimeSettingsDict)
      .def_property_readonly(
          "stance", [](const PyPolicy& p) { return SettingToPython(p.policy().runtime().stance); })
      .def_property_readonly("verify", &VerifyTuple)
      .def_property_readonly("on_recompile", &OnRecompile)
      .def_property_readonly(
          "dispatch",
          [](const PyPolicy& p) { return SettingToPython(p.policy().runtime().dispatch); })
      .def("disassemble",
           [](const PyPolicy& p) { return Disassemble(p.policy().program().image(), *p.schema()); })
      .def("serialize",
           [](const PyPolicy& p) { return py::bytes(SerializePolicy(p.policy(), *p.schema())); });
}

}  // namespace guardpolicy::python
