// fuse_branches.cpp: load-test-branch sequences become one test-and-branch instruction.
//   LOAD_FIELD s; JUMP_IF_x t                    -> BRANCH_FIELD s t
//   LOAD_FIELD s; PUSH_CONST k; <cmp>; JUMP_IF_x t -> BRANCH_COMPARE s k cmp t
//   LOAD_FIELD s; IN_SET k; JUMP_IF_x t          -> BRANCH_IN_SET s k t
//   LOAD_FIELD s; MATCHES r; JUMP_IF_x t         -> BRANCH_MATCHES s r t
// Nothing may jump into the middle of a sequence; the tail becomes NOPs for dead_code.
#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

namespace guardpolicy::passes {
namespace {

bool IsCondJump(Opcode op) { return op == Opcode::kJumpIfFalse || op == Opcode::kJumpIfTrue; }

bool IsFusableCompare(Opcode op) {
  return (op >= Opcode::kEqBool && op <= Opcode::kNeEnum) || op == Opcode::kSetHas ||
         op == Opcode::kContains || op == Opcode::kStartsWith || op == Opcode::kEndsWith;
}

// Replaces code[pc .. pc+len) by `fused` and NOPs; `jump` is the conditional jump at the end.
void Replace(ProgramImage& p, size_t pc, size_t len, Instruction fused, const Instruction& jump) {
  fused.y = jump.op == Opcode::kJumpIfTrue ? 1 : 0;
  fused.c = jump.a;
  p.code[pc] = fused;
  for (size_t k = 1; k < len; ++k) p.code[pc + k] = Instruction{Opcode::kNop};
}

}  // namespace

bool FuseBranches(ProgramImage& p) {
  const std::vector<bool> target = JumpTargets(p);
  auto& c = p.code;
  auto free_of_targets = [&](size_t from, size_t to) {
    for (size_t k = from; k <= to; ++k) {
      if (k >= c.size() || target[k]) return false;
    }
    return true;
  };
  bool changed = false;
  for (size_t pc = 0; pc < c.size(); ++pc) {
    if (c[pc].op != Opcode::kLoadField) continue;
    const int32_t slot = c[pc].a;
    if (free_of_targets(pc + 1, pc + 1) && IsCondJump(c[pc + 1].op)) {
      Replace(p, pc, 2, Instruction{Opcode::kBranchField, slot}, c[pc + 1]);
      changed = true;
    } else if (free_of_targets(pc + 1, pc + 2) && IsCondJump(c[pc + 2].op) &&
               (c[pc + 1].op == Opcode::kInSet || c[pc + 1].op == Opcode::kMatches)) {
      const Opcode op = c[pc + 1].op == Opcode::kInSet ? Opcode::kBranchInSet : Opcode::kBranchMatches;
      Replace(p, pc, 3, Instruction{op, slot, c[pc + 1].a}, c[pc + 2]);
      changed = true;
    } else if (free_of_targets(pc + 1, pc + 3) && c[pc + 1].op == Opcode::kPushConst &&
               IsFusableCompare(c[pc + 2].op) && IsCondJump(c[pc + 3].op)) {
      Replace(p, pc, 4, Instruction{Opcode::kBranchCompare, slot, c[pc + 1].a, 0, c[pc + 2].op}, c[pc + 3]);
      changed = true;
    }
  }
  return changed;
}

}  // namespace guardpolicy::passes
