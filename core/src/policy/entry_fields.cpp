// entry_fields.cpp: literals -> field values, with the GuardSource predicates.
#include "entry_fields.h"

#include <optional>

namespace guardpolicy {
namespace {

// torch._guards.GuardSource predicates (torch 2.8+) from the member name, for entries that
// give `guard_source` only. `is_specialized_nn_module` ignores the FSDP config switch.
std::optional<bool> GuardSourcePredicate(std::string_view field, std::string_view source) {
  const bool unspecialized = source.find("UNSPECIALIZED") != std::string_view::npos;
  if (field == "guard_source.is_local") return source.starts_with("LOCAL");
  if (field == "guard_source.is_unspecialized_nn_module") return unspecialized;
  if (field == "guard_source.is_unspecialized_builtin_nn_module") {
    return source.find("UNSPECIALIZED_BUILTIN") != std::string_view::npos;
  }
  if (field == "guard_source.is_specialized_nn_module") {
    return !unspecialized && source.ends_with("_SPECIALIZED_NN_MODULE");
  }
  if (field == "guard_source.is_fsdp_module") return source.find("FSDP") != std::string_view::npos;
  return std::nullopt;
}

}  // namespace

FieldValues FieldsOf(const EntryLiterals& entry, const Schema& schema) {
  FieldValues values;
  for (const auto& [path, literal] : entry) {
    const int index = schema.FindField(path);
    if (index < 0) continue;  // reported by the checker (GP2015)
    const Type t = schema.fields()[index].type;
    Value v;
    switch (literal.kind) {
      case Literal::Kind::kBool: v.i = literal.b; break;
      case Literal::Kind::kInt: v.i = literal.i; break;
      case Literal::Kind::kString:
        v.s = literal.str;
        if (t.kind == TypeKind::kEnum) v.i = schema.enums()[t.enum_index].Find(literal.str);
        break;
    }
    values[path] = v;
  }
  if (auto source = values.find("guard_source"); source != values.end()) {
    const std::string_view name = source->second.s;
    for (const FieldInfo& field : schema.fields()) {
      if (auto flag = GuardSourcePredicate(field.name, name); flag && !values.count(field.name)) {
        values[field.name] = Value{*flag ? 1 : 0, 0, {}};
      }
    }
  }
  return values;
}

}  // namespace guardpolicy
