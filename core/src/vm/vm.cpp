// vm.cpp: the out-of-line parts of the interpreter (sets, regexes); the loop is in vm.h.
#include "guardpolicy/vm.h"

#include <re2/re2.h>

#include "guardpolicy/plugin.h"
#include "guardpolicy/plugin_values.h"

namespace guardpolicy::vm_internal {

bool InSet(const ConstSet& set, const Value& v) {
  switch (set.elem.kind) {
    case TypeKind::kEnum:
      if (v.i >= 0 && ((set.bits >> v.i) & 1)) return true;
      return !set.strings.empty() && std::binary_search(set.strings.begin(), set.strings.end(), v.s);
    case TypeKind::kInt:
      return std::binary_search(set.ints.begin(), set.ints.end(), v.i);
    default:
      return std::binary_search(set.strings.begin(), set.strings.end(), v.s);
  }
}

// Known members by bit; unknown names by search in the separated list.
bool SetHas(const Value& set, const Value& member) {
  if (member.i >= 0) return (set.bits >> member.i) & 1;
  if (set.s.empty() || member.s.empty()) return false;
  const std::string_view list = set.s;
  for (size_t at = list.find(member.s); at != std::string_view::npos; at = list.find(member.s, at + 1)) {
    const bool starts = at > 0 && list[at - 1] == kSetSeparator[0];
    const bool ends = at + member.s.size() < list.size() && list[at + member.s.size()] == kSetSeparator[0];
    if (starts && ends) return true;
  }
  return false;
}

// RE2's prefilter first. The atoms of a regex come from an and/or tree in which every
// path needs at least one atom (a regex that needs none has no atoms), so a string holding
// none of them cannot match and RE2 need not run. Atoms are lower case: they are searched in
// an ASCII-lower-cased copy; a string with a non-ASCII byte (RE2 folds those by Unicode
// rules) or longer than the buffer skips the prefilter.
bool PrefilterRejects(const RegexFilter& f, std::string_view s) {
  constexpr size_t kBuffer = 512;
  if (f.atoms.empty() || s.size() > kBuffer) return false;
  char buffer[kBuffer];
  unsigned char high = 0;
  for (size_t i = 0; i < s.size(); ++i) {  // branch-free, so the compiler vectorizes it
    const unsigned char c = static_cast<unsigned char>(s[i]);
    high |= c;
    buffer[i] = static_cast<char>(c | (static_cast<unsigned char>(c - 'A') < 26 ? 0x20 : 0));
  }
  if (high & 0x80) return false;
  const std::string_view lower(buffer, s.size());
  for (auto r = f.required.rbegin(); r != f.required.rend(); ++r) {  // the shorter, rarer ones first
    if (!Contains(lower, *r)) return true;
  }
  for (const std::string& atom : f.atoms) {
    if (Contains(lower, atom)) return false;
  }
  return true;
}

bool Matches(const Program& p, int32_t regex, std::string_view s) {
  return !PrefilterRejects(p.regex_filter(regex), s) && RE2::PartialMatch(s, p.regex(regex));
}

Value CallFunction(const Program& p, int32_t fn, const Value* args, int32_t n) {
  gp_value abi[kMaxStack];
  for (int32_t k = 0; k < n; ++k) abi[k] = ToAbi(args[k]);
  const BoundPlugin& bound = p.bound_function(static_cast<size_t>(fn));
  const FunctionRef& ref = p.image().functions[fn];
  if (!bound.plugin) throw PluginError("function `" + ref.name + "` is not bound to a plugin");
  const gp_value out = bound.plugin->Call(static_cast<size_t>(bound.decl), abi, static_cast<uint32_t>(n));
  return Value{ref.result.kind == TypeKind::kBool ? (out.i != 0 ? 1 : 0) : out.i, 0, {}};
}

}  // namespace guardpolicy::vm_internal
