// entry_extractor.h: GuardFilterEntry (Python) -> entry view (Value per program slot).
//
// Reads only the fields a Program loads, each at most once per entry (LazyEntryView),
// through CPython's public API (PyObject_GetAttr, PyObject_IsInstance, ...): every field is
// what the Python expression in docs/schema.md gives. Keeps the Python objects it views
// alive only until Reset(): no reference to any entry, value or guard survives a call.
// Sources (torch 2.8+; checked on 2.13.0):
//   name, guard_type, derived_guard_types, is_global, has_value, value -> the entry's own
//   attributes; guard_source* -> entry.orig_guard.source (a torch._guards.GuardSource) and
//   its predicates; source.*, path, module_path -> entry.orig_guard.originating_source and
//   its `.base` chain (path, module_path: SourcePaths, source_path.h);
//   value.is_* -> isinstance against torch.Tensor / torch.nn.Parameter / torch.nn.Module as
//   `torch` names them when the call runs; user_frame.* -> entry.orig_guard.user_stack[-1]
//   (a traceback.FrameSummary).
// GuardSource names and predicates are asked once per GuardSource object and call (there
// are a dozen members; a policy may ask each entry).
// What to read for a program (FieldId per slot): extractor_plan.h. EntryExtractor's members
// are defined by concept: entry_extractor.cpp (an entry's schema fields),
// entry_extractor_plugins.cpp (plugin fields and filters), entry_extractor_mappings.cpp
// (mapping rows, Policy.evaluate).
// Errors: Python exceptions propagate as pybind11::error_already_set. Needs the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <forward_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "extractor_plan.h"
#include "guardpolicy/bytecode.h"
#include "guardpolicy/plugin.h"
#include "guardpolicy/schema.h"
#include "source_path.h"

namespace guardpolicy::python {

namespace py = pybind11;

class EntryExtractor {
 public:
  explicit EntryExtractor(const ExtractorPlan& plan) : plan_(plan) {}

  // Starts a new entry: forgets the per-entry cache (orig_guard, value, frame).
  void BeginEntry() {
    if (entry_cache_used_) ForgetEntry();
  }
  // Reads program slot `slot` of `entry` into `out`.
  void ExtractSlot(size_t slot, py::handle entry, Value& out) {
    const FieldId id = plan_.ids[slot];
    if (id < FieldId::kPlugin && !mappings_) return ExtractOne(id, entry, out);  // the common case
    ExtractOtherSlot(slot, entry, out);
  }
  // Entries are mappings {field name: value} (Policy.evaluate) instead of GuardFilterEntry
  // objects: absent (or None) fields read as false, 0, "", no enum member, the empty set;
  // a plugin field the row does not give is extracted from the row's core fields (without
  // a Python entry).
  void SetMappings(bool mappings) { mappings_ = mappings; }
  // Runs every filter slot over all `entries` (a tuple of GuardFilterEntry objects, or of
  // mappings when `mappings`); results are read per entry after SetEntryIndex. Throws
  // PluginError or a Python error.
  void RunFilters(py::handle entries, bool mappings);
  void SetEntryIndex(size_t i) { entry_index_ = i; }
  // The member names of enum-set field `id` (derived_guard_types) as the entry lists them,
  // in its order and with its repeats, each read as ExtractSlot reads the set's members (a
  // str each, else TypeError): the set a policy sees is exactly these names. Valid until
  // Reset(). For snapshot rows (snapshot_rows.h).
  std::vector<std::string_view> SetMembers(FieldId id, py::handle entry);
  // Drops the references and strings held for the last call.
  void Reset();

 private:
  struct GuardSourceInfo {
    PyObject* object = nullptr;  // kept alive in keep_alive_
    int ordinal = -1;
    std::string_view name;
    std::array<int8_t, kSchemaFieldCount> preds;  // by FieldId: -1 not asked yet this call, else 0/1
  };
  struct SourceWalk {
    std::string_view kind, root;
    int64_t depth = 0;
  };

  static Value BoolValue(bool b) { return Value{b ? 1 : 0, 0, {}}; }
  static py::object RowGet(py::handle row);  // row.get (a mapping row's)

  void ForgetEntry();
  std::string_view View(py::handle str);
  std::string_view Store(std::string s);
  GuardSourceInfo& GuardSourceOf(py::handle guard_source);
  // The GuardSource predicate of field `id` (`guard_source.<method>`: <method>()), asked
  // once per GuardSource object and call.
  bool Predicate(GuardSourceInfo& info, FieldId id);
  SourceWalk WalkSource(py::handle originating_source);
  bool ViaBuffers(py::handle originating_source);
  const SourcePaths::Paths& PathsOf(py::handle entry);  // walked once per entry
  std::string_view QualifiedTypeName(py::handle obj);
  std::string_view TypeName(py::handle obj);  // type(obj).__name__
  void ExtractOne(FieldId id, py::handle entry, Value& out);
  Value EnumValue(int enum_index, std::string_view name) const;
  // A set of enum members: known ones as bits, unknown names in `s` (see kSetSeparator).
  Value SetValue(int enum_index, py::handle members);
  // isinstance(value, torch.Tensor | torch.nn.Parameter | torch.nn.Module): the class as
  // `torch` names it when the call first asks (looked up once per call).
  enum class TorchClass { kTensor, kParameter, kModule };
  bool IsInstance(py::handle value, TorchClass cls);
  py::object& OrigGuard(py::handle entry);
  bool HasValue(py::handle entry);           // entry.has_value, read once per entry
  py::object* EntryValue(py::handle entry);  // null when has_value is false
  std::string_view Code(py::handle entry);
  py::object FrameAttr(py::handle entry, int which);

  void ExtractOtherSlot(size_t slot, py::handle entry, Value& out);  // plugin, filter, mapping rows
  void ExtractPluginField(size_t slot, py::handle entry, Value& out);
  // A field's value in a mapping row (absent or None: AbsentValue).
  Value MappingValue(py::handle get, const std::string& name, const Type& type);
  // The ABI values of `reads` for one entry.
  std::vector<gp_value> ReadValues(const ExtractorPlan::PluginSlot& ps, py::handle entry, bool mapping);

  const ExtractorPlan& plan_;
  HostStrings host_strings_;
  bool mappings_ = false;
  py::object row_get_;  // the current row's `get` (mapping mode)
  std::vector<std::vector<uint8_t>> filter_keep_;  // slot -> keep per entry (filter slots)
  size_t entry_index_ = 0;
  // Per-entry cache (objects read by several fields).
  py::object orig_guard_, value_, user_frame_;
  int has_value_ = -1;  // -1 unknown, else 0/1
  SourcePaths::Paths paths_;
  bool have_paths_ = false;
  bool entry_cache_used_ = false;  // any of the five above set since ForgetEntry
  // Per-call state.
  std::vector<py::object> keep_alive_;
  std::forward_list<std::string> strings_;  // stable addresses
  std::unordered_map<PyObject*, GuardSourceInfo> guard_sources_;
  py::object torch_classes_[3];  // by TorchClass; empty until asked
  SourcePaths source_paths_;      // its type cache is per call
};

// The VM's entry view over one live GuardFilterEntry: each field is read from Python the
// first time the program loads it, and at most once per entry.
class LazyEntryView {
 public:
  // A program reads at most 64 distinct fields (the schema has 24).
  explicit LazyEntryView(EntryExtractor& extractor) : extractor_(extractor) {}

  void Reset(py::handle entry, size_t index = 0) {
    entry_ = entry;
    extractor_.BeginEntry();
    extractor_.SetEntryIndex(index);
    loaded_ = 0;
  }
  const Value& Get(int32_t slot) {
    const uint64_t bit = uint64_t{1} << slot;
    if (!(loaded_ & bit)) {
      values_[slot] = Value();
      extractor_.ExtractSlot(static_cast<size_t>(slot), entry_, values_[slot]);
      loaded_ |= bit;
    }
    return values_[slot];
  }

 private:
  EntryExtractor& extractor_;
  py::handle entry_;
  std::array<Value, 64> values_;  // by slot; valid where loaded_ has the slot's bit
  uint64_t loaded_ = 0;
};

}  // namespace guardpolicy::python
