// vm.cpp: the interpreter loop. Assumes a verified Program (see verifier.h).
#include "guardpolicy/vm.h"

#include <algorithm>

#include <re2/re2.h>

#include "guardpolicy/verifier.h"

namespace guardpolicy {
namespace {

bool EnumEqual(const Value& a, const Value& b) {
  return (a.i >= 0 && b.i >= 0) ? a.i == b.i : a.s == b.s;
}

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

}  // namespace

Outcome Evaluate(const Program& p, const Value* fields) noexcept {
  Value stack[kMaxStack];
  int sp = 0;  // next free slot
  const Instruction* code = p.code.data();
  size_t pc = 0;
  for (;;) {
    const Instruction& ins = code[pc++];
    switch (ins.op) {
      case Opcode::kLoadField: stack[sp++] = fields[ins.a]; break;
      case Opcode::kPushConst: {
        const Constant& c = p.constants[ins.a];
        stack[sp++] = Value{c.i, c.bits, c.s};
        break;
      }
      case Opcode::kNot: stack[sp - 1].i = !stack[sp - 1].i; break;
#define GP_BINARY(OP, EXPR)                      \
  case Opcode::OP: {                             \
    const Value& a = stack[sp - 2];              \
    const Value& b = stack[sp - 1];              \
    const int64_t r = (EXPR) ? 1 : 0;            \
    --sp;                                        \
    stack[sp - 1] = Value{r, 0, {}};             \
    break;                                       \
  }
      GP_BINARY(kEqBool, a.i == b.i)
      GP_BINARY(kNeBool, a.i != b.i)
      GP_BINARY(kEqInt, a.i == b.i)
      GP_BINARY(kNeInt, a.i != b.i)
      GP_BINARY(kLtInt, a.i < b.i)
      GP_BINARY(kLeInt, a.i <= b.i)
      GP_BINARY(kGtInt, a.i > b.i)
      GP_BINARY(kGeInt, a.i >= b.i)
      GP_BINARY(kEqStr, a.s == b.s)
      GP_BINARY(kNeStr, a.s != b.s)
      GP_BINARY(kEqEnum, EnumEqual(a, b))
      GP_BINARY(kNeEnum, !EnumEqual(a, b))
      GP_BINARY(kSetHas, SetHas(a, b))
      GP_BINARY(kContains, a.s.find(b.s) != std::string_view::npos)
      GP_BINARY(kStartsWith, a.s.starts_with(b.s))
      GP_BINARY(kEndsWith, a.s.ends_with(b.s))
#undef GP_BINARY
      case Opcode::kInSet: {
        const int64_t r = InSet(p.sets[ins.a], stack[sp - 1]) ? 1 : 0;
        stack[sp - 1] = Value{r, 0, {}};
        break;
      }
      case Opcode::kMatches: {
        const bool r = RE2::PartialMatch(stack[sp - 1].s, *p.compiled_regexes[ins.a]);
        stack[sp - 1] = Value{r ? 1 : 0, 0, {}};
        break;
      }
      case Opcode::kJump: pc = static_cast<size_t>(ins.a); break;
      case Opcode::kJumpIfFalse:
        if (!stack[--sp].i) pc = static_cast<size_t>(ins.a);
        break;
      case Opcode::kJumpIfTrue:
        if (stack[--sp].i) pc = static_cast<size_t>(ins.a);
        break;
      case Opcode::kDecide:
        return Outcome{static_cast<Decision>(ins.a), ins.b};
      case Opcode::kNop:
        break;
      default:
        return Outcome{Decision::kKeep, -1};  // unreachable for verified programs
    }
  }
}

}  // namespace guardpolicy
