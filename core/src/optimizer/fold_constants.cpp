// fold_constants.cpp: operators over constants, and branches on constants.
#include <optional>

#include "guardpolicy/optimizer.h"
#include "guardpolicy/vm.h"
#include "jump_targets.h"

namespace guardpolicy::passes {
namespace {

int32_t InternBool(ProgramImage& p, bool b) {
  for (size_t i = 0; i < p.constants.size(); ++i) {
    if (p.constants[i].type.kind == TypeKind::kBool && p.constants[i].i == (b ? 1 : 0)) return int32_t(i);
  }
  p.constants.push_back({Type::Bool(), b ? 1 : 0, 0, {}});
  return static_cast<int32_t>(p.constants.size() - 1);
}

// The VM's own comparison, so folding can never disagree with running.
std::optional<bool> Apply(Opcode op, const Constant& a, const Constant& b) {
  if (!IsBinary(op)) return std::nullopt;
  return vm_internal::Binary(op, Value{a.i, a.bits, a.s}, Value{b.i, b.bits, b.s});
}

// One rewrite at `pc` if a pattern matches; no window spans a jump target.
bool FoldAt(ProgramImage& p, size_t pc, const std::vector<bool>& target) {
  auto& c = p.code;
  if (c[pc].op != Opcode::kPushConst || pc + 1 >= c.size() || target[pc + 1]) return false;
  const Constant k = p.constants[c[pc].a];
  Instruction& next = c[pc + 1];
  if (k.type.kind == TypeKind::kBool && next.op == Opcode::kNot) {
    c[pc].a = InternBool(p, !k.i);
    next = {Opcode::kNop, 0, 0};
    return true;
  }
  if (k.type.kind == TypeKind::kBool && (next.op == Opcode::kJumpIfFalse || next.op == Opcode::kJumpIfTrue)) {
    const bool taken = (next.op == Opcode::kJumpIfTrue) == (k.i != 0);
    c[pc] = {Opcode::kNop, 0, 0};
    next = taken ? Instruction{Opcode::kJump, next.a, 0} : Instruction{Opcode::kNop, 0, 0};
    return true;
  }
  if (next.op == Opcode::kPushConst && pc + 2 < c.size() && !target[pc + 2]) {
    if (auto r = Apply(c[pc + 2].op, k, p.constants[next.a])) {
      c[pc] = {Opcode::kNop, 0, 0};
      next = {Opcode::kNop, 0, 0};
      c[pc + 2] = {Opcode::kPushConst, InternBool(p, *r), 0};
      return true;
    }
  }
  return false;
}

}  // namespace

bool FoldConstants(ProgramImage& p) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    const std::vector<bool> target = JumpTargets(p);
    for (size_t pc = 0; pc < p.code.size(); ++pc) again |= FoldAt(p, pc, target);
    changed |= again;
  }
  return changed;
}

}  // namespace guardpolicy::passes
