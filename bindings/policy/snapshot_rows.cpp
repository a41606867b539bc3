// snapshot_rows.cpp: EntryExtractor over every schema field, values as Python JSON values.
#include "snapshot_rows.h"

#include <stdexcept>
#include <vector>

#include "entry_extractor.h"

namespace guardpolicy::python {
namespace {

py::str Str(std::string_view s) { return py::str(s.data(), s.size()); }

// The value of slot `slot` of `entry` as a JSON value of the field's type.
py::object FieldValue(EntryExtractor& extractor, const ExtractorPlan& plan, size_t slot, py::handle entry) {
  const TypeKind kind = plan.types[slot].kind;
  if (kind == TypeKind::kEnumSet) {
    py::list members;
    for (std::string_view m : extractor.SetMembers(plan.ids[slot], entry)) members.append(Str(m));
    return members;
  }
  Value v;
  extractor.ExtractSlot(slot, entry, v);
  switch (kind) {
    case TypeKind::kBool: return py::bool_(v.i != 0);
    case TypeKind::kInt: return py::int_(v.i);
    case TypeKind::kString:
    case TypeKind::kEnum: return Str(v.s);  // an enum member by name, known to the schema or not
    case TypeKind::kEnumSet:
    case TypeKind::kError: break;
  }
  throw std::logic_error("SnapshotRows: field `" + plan.names[slot] + "` has no JSON rendering");
}

}  // namespace

py::list SnapshotRows(py::handle entries, std::shared_ptr<const Schema> schema) {
  const ExtractorPlan plan(std::move(schema));
  EntryExtractor extractor(plan);
  std::vector<py::str> keys;
  for (const std::string& name : plan.names) keys.push_back(Str(name));
  py::list rows;
  for (py::handle entry : py::iterable(py::reinterpret_borrow<py::object>(entries))) {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // a Ctrl-C ends the call
    extractor.BeginEntry();
    py::dict row;
    for (size_t slot = 0; slot < plan.ids.size(); ++slot) row[keys[slot]] = FieldValue(extractor, plan, slot, entry);
    rows.append(row);
  }
  extractor.Reset();
  return rows;
}

}  // namespace guardpolicy::python
