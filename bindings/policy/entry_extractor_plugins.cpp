// entry_extractor_plugins.cpp: EntryExtractor's plugin slots (entry_extractor.h): a plugin
// field, read by its plugin's extractor over the core fields it declares, and the filter
// slots, run once per call over every entry before any entry is decided.
#include <cstdint>
#include <vector>

#include "entry_extractor.h"
#include "guardpolicy/plugin_values.h"

namespace guardpolicy::python {
namespace {

// Runs a plugin callback. A Python exception it left set (a plugin that reads the Python
// entry leaves a KeyboardInterrupt or SystemExit it met, plugin_api.h) is raised in place
// of the plugin's own error, and never left pending.
template <class F>
void CallPlugin(F&& call) {
  try {
    call();
  } catch (const PluginError&) {
    if (PyErr_Occurred()) throw py::error_already_set();
    throw;
  }
  if (PyErr_Occurred()) throw py::error_already_set();
}

}  // namespace

std::vector<gp_value> EntryExtractor::ReadValues(const ExtractorPlan::PluginSlot& ps,
                                                 py::handle entry, bool mapping) {
  std::vector<gp_value> out;
  py::object get = mapping ? RowGet(entry) : py::object();
  for (size_t k = 0; k < ps.reads.size(); ++k) {
    Value v;
    if (mapping)
      v = MappingValue(get, ps.read_names[k], ps.read_types[k]);
    else
      ExtractOne(ps.reads[k], entry, v);
    out.push_back(ToAbi(v));
  }
  return out;
}

void EntryExtractor::ExtractPluginField(size_t slot, py::handle entry, Value& out) {
  const ExtractorPlan::PluginSlot& ps = plan_.plugin_slots[slot];
  const std::vector<gp_value> reads = ReadValues(ps, entry, mappings_);
  const gp_entry_view view = host_strings_.View(reads.data(), static_cast<uint32_t>(reads.size()),
                                                mappings_ ? nullptr : entry.ptr());
  gp_value result{};
  CallPlugin([&] { ps.field->plugin->Extract(static_cast<size_t>(ps.field->decl), view, result); });
  out = FromAbi(result, ps.field->type, *plan_.schema);
  if (!out.s.empty()) out.s = host_strings_.Keep(out.s);
}

void EntryExtractor::RunFilters(py::handle entries, bool mappings) {
  const size_t n = static_cast<size_t>(PyTuple_GET_SIZE(entries.ptr()));
  filter_keep_.assign(plan_.ids.size(), {});
  for (size_t slot = 0; slot < plan_.ids.size(); ++slot) {
    if (plan_.ids[slot] != FieldId::kFilter) continue;
    const ExtractorPlan::PluginSlot& ps = plan_.plugin_slots[slot];
    std::vector<std::vector<gp_value>> reads(n);
    std::vector<gp_entry_view> views(n);
    for (size_t i = 0; i < n; ++i) {
      py::handle entry = PyTuple_GET_ITEM(entries.ptr(), static_cast<Py_ssize_t>(i));
      BeginEntry();
      reads[i] = ReadValues(ps, entry, mappings);
      views[i] = host_strings_.View(reads[i].data(), static_cast<uint32_t>(reads[i].size()),
                                    mappings ? nullptr : entry.ptr());
    }
    BeginEntry();
    std::vector<gp_value> params;
    for (const Constant& c : ps.params) params.push_back(ToAbi(Value{c.i, c.bits, c.s}));
    std::vector<uint8_t>& keep = filter_keep_[slot];
    keep.assign(n, 1);
    CallPlugin([&] {
      ps.filter->plugin->RunFilter(static_cast<size_t>(ps.filter->decl), params.data(),
                                   views.data(), static_cast<uint32_t>(n), keep.data());
    });
  }
}

}  // namespace guardpolicy::python
