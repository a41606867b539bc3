// enum_bitsets.cpp: known enum members of `in {...}` sets move from names to a bit mask.
#include <algorithm>

#include "guardpolicy/optimizer.h"

namespace guardpolicy::passes {

bool EnumBitsets(ProgramImage& p, const Schema& schema) {
  bool changed = false;
  for (ConstSet& set : p.sets) {
    if (set.elem.kind != TypeKind::kEnum) continue;
    const EnumInfo& info = schema.enums()[set.elem.enum_index];
    std::vector<std::string> unknown;
    for (const std::string& name : set.strings) {
      const int ordinal = info.Find(name);
      if (ordinal >= 0) {
        set.bits |= uint64_t{1} << ordinal;
        changed = true;
      } else {
        unknown.push_back(name);
      }
    }
    set.strings = std::move(unknown);  // stays sorted
  }
  return changed;
}

}  // namespace guardpolicy::passes
