// known_enum_values.cpp: folds the tests on an enum field whose answer the path to them
// already fixes.
//
// After type_dispatch a rule's code is entered only through DISPATCH tables that route
// there the guard types the rule admits, so the rule's own `guard_type == X` is always
// true there; after a failed `guard_type == X`, a later `guard_type == X` is always false;
// a DISPATCH reached only by types it sends to one place is a jump. For each enum slot the
// pass computes, per instruction, the members the slot can hold there (bit v = member v,
// bit 63 = a name outside the schema), a forward dataflow that one sweep in pc order
// settles since every jump is forward. A test whose outcome is fixed becomes a NOP (never
// jumps) or a JUMP (always jumps); dead_code then removes what no path reaches.
//
// A name outside the schema (bit 63) is treated as possibly equal to anything and possibly
// in any set, so no fold depends on how such a name compares.
#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

#include <algorithm>

namespace guardpolicy::passes {
namespace {

constexpr uint64_t kOther = uint64_t{1} << 63;

struct Edges {
  uint64_t taken = 0;  // members with which the instruction jumps
  uint64_t fall = 0;   // members with which it falls through
};

uint64_t Bit(int64_t member) { return uint64_t{1} << member; }

// The members of a BRANCH_IN_SET's set (exact for schema members; bit 63 when the set
// names members outside the schema, which a name outside it may equal).
uint64_t SetMembers(const ConstSet& set, const std::vector<std::string>& members) {
  uint64_t in = set.bits;
  for (size_t v = 0; v < members.size(); ++v) {
    if (std::binary_search(set.strings.begin(), set.strings.end(), members[v])) in |= Bit(static_cast<int64_t>(v));
  }
  if (!set.strings.empty()) in |= kOther;
  return in;
}

// How a fused test on `slot` splits `possible` between its jump and its fall-through; an
// instruction that does not test the slot passes `possible` to both.
Edges Split(const ProgramImage& p, const Instruction& ins, int32_t slot, uint64_t possible,
            const std::vector<std::string>& members) {
  uint64_t holds = 0;  // members for which the test is true (bit 63 on both sides)
  uint64_t fails = 0;
  if (ins.op == Opcode::kBranchCompare && ins.a == slot && (ins.x == Opcode::kEqEnum || ins.x == Opcode::kNeEnum)) {
    const int64_t member = p.constants[ins.b].i;
    if (member < 0 || static_cast<size_t>(member) >= members.size()) return Edges{possible, possible};
    const uint64_t equal = Bit(member) | kOther, unequal = ~Bit(member);
    holds = ins.x == Opcode::kEqEnum ? equal : unequal;
    fails = ins.x == Opcode::kEqEnum ? unequal : equal;
  } else if (ins.op == Opcode::kBranchInSet && ins.a == slot) {
    holds = SetMembers(p.sets[ins.b], members);
    fails = ~holds | kOther;
  } else {
    return Edges{possible, possible};
  }
  const uint64_t when_true = possible & holds, when_false = possible & fails;
  return ins.y ? Edges{when_true, when_false} : Edges{when_false, when_true};
}

bool FoldSlot(ProgramImage& p, int32_t slot, const std::vector<std::string>& members) {
  const size_t n = p.code.size();
  const uint64_t all = (members.size() >= 63 ? ~uint64_t{0} : Bit(static_cast<int64_t>(members.size())) - 1) | kOther;
  std::vector<uint64_t> possible(n + 1, 0);
  possible[0] = all;
  bool changed = false;
  for (size_t pc = 0; pc < n; ++pc) {
    const uint64_t here = possible[pc];
    if (here == 0) continue;  // no path reaches it
    Instruction& ins = p.code[pc];
    if (ins.op == Opcode::kDispatch && ins.a != slot) {  // another slot's jump table
      for (const int32_t t : p.dispatch_tables[ins.b]) possible[t] |= here;
      continue;
    }
    if (ins.op == Opcode::kDispatch) {
      const std::vector<int32_t>& table = p.dispatch_tables[ins.b];
      const size_t other = table.size() - 1;
      int32_t only = -1;
      bool one_target = true;
      for (size_t v = 0; v < 64; ++v) {
        if (!((here >> v) & 1)) continue;
        const int32_t t = table[v < other ? v : other];
        possible[t] |= Bit(static_cast<int64_t>(v));
        if (only >= 0 && t != only) one_target = false;
        only = t;
      }
      if (one_target && only >= 0) {
        ins = Instruction{Opcode::kJump, only};
        changed = true;
      }
      continue;
    }
    const Edges e = Split(p, ins, slot, here, members);
    if (int32_t* t = JumpTarget(ins)) {
      const bool conditional = ins.op != Opcode::kJump;
      if (conditional && e.taken == 0) {  // never jumps
        ins = Instruction{Opcode::kNop};
        changed = true;
      } else if (conditional && e.fall == 0 && ins.op != Opcode::kJumpIfFalse && ins.op != Opcode::kJumpIfTrue) {
        ins = Instruction{Opcode::kJump, *t};  // always jumps (fused tests leave the stack as it is)
        changed = true;
      }
    }
    if (const int32_t* t = JumpTarget(ins)) possible[*t] |= ins.op == Opcode::kJump ? here : e.taken;
    const bool falls_through = ins.op != Opcode::kJump && ins.op != Opcode::kDecide;
    if (falls_through) possible[pc + 1] |= ins.op == Opcode::kNop ? here : e.fall;
  }
  return changed;
}

}  // namespace

bool FoldKnownEnumValues(ProgramImage& p, const Schema& schema) {
  bool changed = false;
  for (size_t slot = 0; slot < p.fields.size(); ++slot) {
    const Type& t = p.field_types[slot];
    if (t.kind != TypeKind::kEnum || t.enum_index < 0) continue;
    changed |= FoldSlot(p, static_cast<int32_t>(slot), schema.enums()[t.enum_index].members);
  }
  return changed;
}

}  // namespace guardpolicy::passes
