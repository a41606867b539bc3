// bind.cpp: Program::Bind, resolving a program's names against a schema and its plugins.
#include <fmt/format.h>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/plugin.h"

namespace guardpolicy {

namespace {

[[noreturn]] void Unbound(const std::string& what) { throw LinkError(LinkError::Kind::kUnbound, what); }

}  // namespace

void Program::Bind(const Schema& schema) {
  const std::vector<std::string>& fields = image_.fields;
  const std::vector<Type>& field_types = image_.field_types;
  const std::vector<FunctionRef>& functions = image_.functions;
  bound_functions_.assign(functions.size(), {});
  for (size_t slot = 0; slot < fields.size(); ++slot) {
    const std::vector<Constant>& args = image_.FieldArgs(slot);
    const int field = schema.FindField(fields[slot]);
    if (field >= 0) {
      if (schema.fields()[field].type != field_types[slot]) {
        Unbound(fmt::format("field `{}` has type {} here but {} in the schema", fields[slot],
                            schema.TypeName(field_types[slot]), schema.TypeName(schema.fields()[field].type)));
      }
      if (!args.empty()) Unbound(fmt::format("field `{}` takes no arguments", fields[slot]));
      continue;
    }
    const int fn = schema.FindFunction(fields[slot]);
    if (fn < 0 || !schema.functions()[fn].is_filter) {
      Unbound(fmt::format("`{}` is neither a schema field nor a filter of a loaded plugin", fields[slot]));
    }
    const FunctionInfo& f = schema.functions()[fn];
    bool match = field_types[slot] == Type::Bool() && args.size() == f.args.size();
    for (size_t k = 0; match && k < f.args.size(); ++k) match = args[k].type == f.args[k];
    if (!match) Unbound(fmt::format("filter `{}` is declared with other parameters", f.name));
  }
  for (size_t i = 0; i < functions.size(); ++i) {
    const int fn = schema.FindFunction(functions[i].name);
    if (fn < 0 || schema.functions()[fn].is_filter) {
      Unbound(fmt::format("`{}` is not a function of a loaded plugin", functions[i].name));
    }
    const FunctionInfo& f = schema.functions()[fn];
    if (f.args != functions[i].args || f.result != functions[i].result) {
      Unbound(fmt::format("function `{}` is declared with another signature", f.name));
    }
    bound_functions_[i] = {f.plugin, f.decl};
  }
}

}  // namespace guardpolicy
