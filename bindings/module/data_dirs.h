// data_dirs.h: the Schema and the filter Registry of each data directory (the package's
// data/: schema/guard_entry.yaml, std/), made on first use and kept for the process.
//
// A data directory's schema is loaded once, then replaced by each plugin loaded into it
// (plugins.h); a policy keeps the schema it was compiled against. Thread-safe (one mutex).
// Errors: the schema's loader's (SchemaError) on a first use.
#pragma once

#include <memory>
#include <string>

#include "guardpolicy/registry.h"
#include "guardpolicy/schema.h"

namespace guardpolicy::python {

// The current schema of `data_dir` (loaded from data_dir/schema/guard_entry.yaml once).
std::shared_ptr<const Schema> SchemaFor(const std::string& data_dir);
// Makes `schema` (the current one extended by a plugin) what later loads under `data_dir` see.
void ReplaceSchema(const std::string& data_dir, std::shared_ptr<const Schema> schema);
// The filter registry of `data_dir` (builtin, std, plugin filters, loaded policies), on the
// directory's current schema.
Registry& RegistryFor(const std::string& data_dir);

}  // namespace guardpolicy::python
