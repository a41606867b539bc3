// bind.cpp: Program::Bind, resolving a program's names against a schema and its plugins.
#include <fmt/format.h>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/plugin.h"

namespace guardpolicy {

std::string Program::Bind(const Schema& schema) {
  bound_functions.assign(functions.size(), {});
  bound_filters.assign(fields.size(), {});
  if (field_args.size() != fields.size()) return "field table and field arguments differ in size";
  for (size_t slot = 0; slot < fields.size(); ++slot) {
    const int field = schema.FindField(fields[slot]);
    if (field >= 0) {
      if (schema.fields()[field].type != field_types[slot]) {
        return fmt::format("field `{}` has type {} here but {} in the schema", fields[slot],
                           schema.TypeName(field_types[slot]), schema.TypeName(schema.fields()[field].type));
      }
      if (!field_args[slot].empty()) return fmt::format("field `{}` takes no arguments", fields[slot]);
      continue;
    }
    const int fn = schema.FindFunction(fields[slot]);
    if (fn < 0 || !schema.functions()[fn].is_filter) {
      return fmt::format("`{}` is neither a schema field nor a filter of a loaded plugin", fields[slot]);
    }
    const FunctionInfo& f = schema.functions()[fn];
    bool match = field_types[slot] == Type::Bool() && field_args[slot].size() == f.args.size();
    for (size_t k = 0; match && k < f.args.size(); ++k) match = field_args[slot][k].type == f.args[k];
    if (!match) return fmt::format("filter `{}` is declared with other parameters", f.name);
    bound_filters[slot] = {f.plugin, f.decl};
  }
  for (size_t i = 0; i < functions.size(); ++i) {
    const int fn = schema.FindFunction(functions[i].name);
    if (fn < 0 || schema.functions()[fn].is_filter) {
      return fmt::format("`{}` is not a function of a loaded plugin", functions[i].name);
    }
    const FunctionInfo& f = schema.functions()[fn];
    if (f.args != functions[i].args || f.result != functions[i].result) {
      return fmt::format("function `{}` is declared with another signature", f.name);
    }
    bound_functions[i] = {f.plugin, f.decl};
  }
  return {};
}

}  // namespace guardpolicy
