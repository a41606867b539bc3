// plugin_values.h: VM values <-> plugin ABI values (gp_value), see plugin_api.h.
#pragma once

#include "guardpolicy/bytecode.h"
#include "guardpolicy/plugin_api.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// Borrows `v`'s string; valid while `v`'s storage lives.
inline gp_value ToAbi(const Value& v) { return gp_value{v.i, v.bits, v.s.data(), v.s.size()}; }

// A plugin's value of type `type` as a VM value. Bools become 0/1; an enum's ordinal is
// looked up by name in the schema (a plugin's ordinal is not trusted); strings are
// borrowed from the plugin (see gp_value).
inline Value FromAbi(const gp_value& v, const Type& type, const Schema& schema) {
  Value out;
  const std::string_view s = v.str ? std::string_view(v.str, v.len) : std::string_view();
  switch (type.kind) {
    case TypeKind::kBool: out.i = v.i != 0; break;
    case TypeKind::kInt: out.i = v.i; break;
    case TypeKind::kString: out.s = s; break;
    case TypeKind::kEnum:
      out.s = s;
      out.i = schema.enums()[type.enum_index].Find(s);
      break;
    case TypeKind::kEnumSet: {
      const size_t n = schema.enums()[type.enum_index].members.size();
      out.bits = n >= 64 ? v.bits : (v.bits & ((uint64_t{1} << n) - 1));
      break;
    }
    case TypeKind::kError: break;
  }
  return out;
}

}  // namespace guardpolicy
