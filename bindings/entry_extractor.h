// entry_extractor.h: GuardFilterEntry (Python) -> entry view (Value per program slot).
//
// Reads only the fields a Program declares, each at most once per entry, and keeps the
// Python objects it views alive only until Reset(): no reference to any entry, value or
// guard survives a call. Sources (torch 2.8+; checked on 2.13.0):
//   name, guard_type, derived_guard_types, is_global, has_value, value -> the entry's own
//   attributes; guard_source* -> entry.orig_guard.source (a torch._guards.GuardSource) and
//   its predicates; source.* -> entry.orig_guard.originating_source and its `.base` chain;
//   user_frame.* -> entry.orig_guard.user_stack[-1] (a traceback.FrameSummary).
// Errors: Python exceptions propagate as pybind11::error_already_set. Needs the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/schema.h"

namespace guardpolicy::python {

namespace py = pybind11;

enum class FieldId : uint8_t {
  kName, kGuardType, kDerivedGuardTypes, kIsGlobal, kHasValue, kGuardSource,
  kGsIsLocal, kGsIsUnspecializedNNModule, kGsIsUnspecializedBuiltinNNModule,
  kGsIsSpecializedNNModule, kGsIsFsdpModule, kSourceKind, kSourceRoot, kSourceDepth,
  kValueType, kValueIsTensor, kValueIsParameter, kValueIsBuffer, kValueIsModule,
  kUserFrameFile, kUserFrameLine, kUserFrameFunction,
};

class EntryExtractor {
 public:
  // Throws std::invalid_argument for a program field this binding cannot read.
  EntryExtractor(const Program& program, const Schema& schema);

  // Fills `out` (program.fields.size() values) from one GuardFilterEntry.
  void Extract(py::handle entry, Value* out);
  // Fills `out` from any mapping {field name: value}; absent (or None) fields read as
  // false, 0, "", no enum member, the empty set.
  void ExtractMapping(py::handle mapping, Value* out);
  // Drops the references and strings held for the last call.
  void Reset();

 private:
  struct GuardSourceInfo {
    int ordinal = -1;
    std::string_view name;
    bool preds[5] = {};
  };
  struct SourceWalk {
    std::string_view kind, root;
    int64_t depth = 0;
    bool via_buffers = false;
  };

  std::string_view View(py::handle str);
  std::string_view Store(std::string s);
  const GuardSourceInfo& GuardSourceOf(py::handle guard_source);
  SourceWalk WalkSource(py::handle originating_source);
  void ExtractOne(FieldId id, py::handle entry, Value& out);
  Value EnumValue(int enum_index, std::string_view name) const;
  // A set of enum members: known ones as bits, unknown names in `s` (see kSetSeparator).
  Value SetValue(int enum_index, py::handle members);
  void LoadTorchTypes();

  std::vector<FieldId> ids_;
  int guard_type_enum_ = -1;
  int guard_source_enum_ = -1;
  const Schema& schema_;
  std::unordered_map<std::string, int> guard_type_ordinal_;

  // Per-entry cache (objects read by several fields).
  py::object orig_guard_, value_, user_frame_;
  bool have_walk_ = false;
  SourceWalk walk_;
  // Per-call state.
  std::vector<py::object> keep_alive_;
  std::deque<std::string> strings_;
  std::unordered_map<PyObject*, GuardSourceInfo> guard_sources_;
};

}  // namespace guardpolicy::python
