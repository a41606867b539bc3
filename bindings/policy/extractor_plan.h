// extractor_plan.h: what the binding reads for one program (ExtractorPlan), and the fields
// it can read (FieldId, one per field of the schema's field table, schema_fields.h).
//
// A plan maps each slot of a program's field table to its FieldId: a schema field, a
// plugin field (read by the plugin's extractor over the core fields it declares it reads)
// or a plugin filter slot. Built once per compiled policy; immutable, shareable. The
// extractor that reads the fields is entry_extractor.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/schema.h"
#include "schema_fields.h"

namespace guardpolicy::python {

// The schema's fields (schema_fields.h, generated from policies/schema/guard_entry.yaml at
// build time: FieldId::kGuardSourceIsLocal is `guard_source.is_local`), then two kinds of
// plugin slot. A schema field without a case in EntryExtractor::ExtractOne does not build.
enum class FieldId : uint8_t {
#define GUARDPOLICY_FIELD_ID(id, name) k##id,
  GUARDPOLICY_SCHEMA_FIELDS(GUARDPOLICY_FIELD_ID)
#undef GUARDPOLICY_FIELD_ID
      kPlugin,  // a plugin field: the plugin's extractor over its `reads` and the entry
  kFilter,      // a plugin filter slot: run once per call over every entry (RunFilters)
};
constexpr size_t kSchemaFieldCount = static_cast<size_t>(FieldId::kPlugin);

// The schema's field names, in schema order (what FieldId numbers).
std::vector<std::string> SchemaFieldNames();

// What to read for one program, built once per compiled policy; immutable, shareable.
struct ExtractorPlan {
  // Throws std::invalid_argument for a program field this binding cannot read, or for a
  // program of more than 64 fields.
  ExtractorPlan(const Program& program, std::shared_ptr<const Schema> schema);
  // Every schema field of the binding's field table, slot i = field i in schema order (the
  // rows of a snapshot, snapshot_rows.h). Throws std::invalid_argument for a field
  // `schema` does not declare.
  explicit ExtractorPlan(std::shared_ptr<const Schema> schema);

  // What a plugin-field or filter slot needs beside its FieldId.
  struct PluginSlot {
    const FieldInfo* field = nullptr;      // kPlugin
    const FunctionInfo* filter = nullptr;  // kFilter
    std::vector<FieldId> reads;            // core fields the declaration reads
    std::vector<std::string> read_names;
    std::vector<Type> read_types;
    std::vector<Constant> params;  // kFilter: bound parameters
  };

  std::vector<FieldId> ids;              // slot -> field
  std::vector<std::string> names;        // slot -> field name
  std::vector<Type> types;               // slot -> type
  std::vector<PluginSlot> plugin_slots;  // slot-aligned; empty members for core fields
  bool has_filters = false;
  std::shared_ptr<const Schema> schema;
  int guard_type_enum = -1;
  int guard_source_enum = -1;
  std::unordered_map<std::string_view, int> guard_type_ordinal;  // views into the schema

 private:
  // Appends the FieldId of slot `slot` of `image` (and fills its PluginSlot).
  void AddSlot(const ProgramImage& image, size_t slot);
  // The core fields a plugin declaration reads (`reads`: indices of schema fields).
  void AddReads(PluginSlot& ps, const std::vector<int>& reads) const;
  void FindEnums();  // guard_type_enum, guard_source_enum, guard_type_ordinal
};

}  // namespace guardpolicy::python
