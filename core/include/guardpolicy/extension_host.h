// extension_host.h: plugin-field and filter slots for entries that do not come from Python.
//
// A guard snapshot (`guardpolicy check`) and a `test` block give entries as core field
// values. For such entries, a program's plugin-field slots run the plugin's extractor over
// the core fields it declared in `reads` (gp_entry_view.py_entry is null, so a field that
// needs the Python entry fails with the plugin's error), and each filter slot runs the
// filter once over all the entries (true when the filter drops the entry).
// Errors: PluginError from the plugin.
#pragma once

#include <vector>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/plugin.h"
#include "guardpolicy/schema.h"
#include "guardpolicy/snapshot.h"

namespace guardpolicy {

// `views[i]` is entry i's slot-ordered values (Snapshot::View); a plugin-field slot is
// filled only when `entries[i]` does not already give that field. Strings the plugins
// return are copied into `strings`.
void FillPluginSlots(const Program& program, const Schema& schema, const std::vector<FieldValues>& entries,
                     std::vector<std::vector<Value>>& views, HostStrings& strings);

// The filter slots only (each filter once over all the entries).
void FillFilterSlots(const Program& program, const Schema& schema, const std::vector<FieldValues>& entries,
                     std::vector<std::vector<Value>>& views, HostStrings& strings);

// A VM entry view (EvaluateView) over one entry's slot-ordered values with the filter
// slots filled: a plugin field the entry does not give is extracted the first time the
// program reads it, so a rule decided earlier never needs it.
class HostEntryView {
 public:
  HostEntryView(const Program& program, const Schema& schema, const FieldValues& entry, std::vector<Value>& values,
                HostStrings& strings);
  const Value& Get(int32_t slot);

 private:
  const Schema& schema_;
  const FieldValues& entry_;
  std::vector<Value>& values_;
  HostStrings& strings_;
  std::vector<const FieldInfo*> pending_;  // slot -> plugin field still to extract, or null
};

}  // namespace guardpolicy
