// extractor_plan.cpp: a program's fields -> FieldIds and plugin slots (see extractor_plan.h).
#include "extractor_plan.h"

#include <optional>
#include <stdexcept>
#include <utility>

namespace guardpolicy::python {
namespace {

constexpr std::pair<const char*, FieldId> kFieldIds[] = {
#define GUARDPOLICY_FIELD_ENTRY(id, name) {name, FieldId::k##id},
    GUARDPOLICY_SCHEMA_FIELDS(GUARDPOLICY_FIELD_ENTRY)
#undef GUARDPOLICY_FIELD_ENTRY
};

std::optional<FieldId> CoreFieldId(std::string_view field) {
  for (const auto& [name, id] : kFieldIds) {
    if (field == name) return id;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> SchemaFieldNames() {
  std::vector<std::string> out;
  for (const auto& [name, id] : kFieldIds) out.emplace_back(name);
  return out;
}

ExtractorPlan::ExtractorPlan(const Program& program, std::shared_ptr<const Schema> schema_in)
    : schema(std::move(schema_in)) {
  names = program.image().fields;
  types = program.image().field_types;
  plugin_slots.resize(program.image().fields.size());
  for (size_t slot = 0; slot < program.image().fields.size(); ++slot)
    AddSlot(program.image(), slot);
  if (ids.size() > 64) throw std::invalid_argument("a program reads more than 64 fields");
  FindEnums();
}

ExtractorPlan::ExtractorPlan(std::shared_ptr<const Schema> schema_in)
    : schema(std::move(schema_in)) {
  for (const auto& [name, id] : kFieldIds) {
    const int index = schema->FindField(name);
    if (index < 0)
      throw std::invalid_argument(std::string("the schema has no field `") + name + "`");
    ids.push_back(id);
    names.emplace_back(name);
    types.push_back(schema->fields()[index].type);
  }
  plugin_slots.resize(ids.size());
  FindEnums();
}

void ExtractorPlan::AddSlot(const ProgramImage& image, size_t slot) {
  const std::string& field = image.fields[slot];
  PluginSlot& ps = plugin_slots[slot];
  const int index = schema->FindField(field);
  const int fn = index < 0 ? schema->FindFunction(field) : -1;
  if (index >= 0 && schema->fields()[index].plugin) {
    ids.push_back(FieldId::kPlugin);
    ps.field = &schema->fields()[index];
    AddReads(ps, ps.field->reads);
  } else if (fn >= 0 && schema->functions()[fn].is_filter) {
    ids.push_back(FieldId::kFilter);
    ps.filter = &schema->functions()[fn];
    ps.params = image.field_args[slot];
    has_filters = true;
    AddReads(ps, ps.filter->reads);
  } else if (auto id = CoreFieldId(field)) {
    ids.push_back(*id);
  } else {
    throw std::invalid_argument("no extractor for field `" + field + "`");
  }
}

void ExtractorPlan::AddReads(PluginSlot& ps, const std::vector<int>& reads) const {
  for (const int read : reads) {
    const FieldInfo& r = schema->fields()[read];
    auto id = CoreFieldId(r.name);
    if (!id) throw std::invalid_argument("no extractor for field `" + r.name + "`");
    ps.reads.push_back(*id);
    ps.read_names.push_back(r.name);
    ps.read_types.push_back(r.type);
  }
}

void ExtractorPlan::FindEnums() {
  guard_type_enum = schema->FindEnum("GuardType");
  guard_source_enum = schema->FindEnum("GuardSource");
  if (guard_type_enum >= 0) {
    const auto& members = schema->enums()[guard_type_enum].members;
    for (size_t i = 0; i < members.size(); ++i)
      guard_type_ordinal[members[i]] = static_cast<int>(i);
  }
}

}  // namespace guardpolicy::python
