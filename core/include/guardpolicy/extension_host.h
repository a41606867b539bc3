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
#include "guardpolicy/vm.h"

namespace guardpolicy {

// Decides `entries` as one guard_filter_fn call: each filter runs once over all of them,
// and a plugin field an entry does not give is extracted the first time a rule reads it
// (absent core fields read as false, 0, "", no enum member). Strings the plugins return
// are kept in `strings`. Throws PluginError from a plugin.
std::vector<Outcome> EvaluateEntries(const Program& program, const Schema& schema,
                                     const std::vector<FieldValues>& entries, HostStrings& strings);

}  // namespace guardpolicy
