// snapshot_rows.h: GuardFilterEntry objects -> snapshot rows, read by the VM's own reader.
//
// A row is {schema field name: value} in schema order, each field read by EntryExtractor
// exactly as a policy's program reads it (entry_extractor.h), rendered as a JSON value:
// bool, int, str (strings and enum members, by name), list of str (enum sets, as the entry
// lists them). So `policy.evaluate(rows) == policy(entries)` for every policy over core
// fields. Rows hold no reference to any entry, value, guard or source.
// Errors: a field the extractor cannot read raises its Python exception (TypeError for an
// attribute of the wrong type). Needs the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "guardpolicy/schema.h"

namespace guardpolicy::python {

// One row per entry of `entries` (an iterable of GuardFilterEntry), in order.
pybind11::list SnapshotRows(pybind11::handle entries, std::shared_ptr<const Schema> schema);

}  // namespace guardpolicy::python
