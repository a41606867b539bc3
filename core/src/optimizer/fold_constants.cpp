// fold_constants.cpp: operators over constants, and branches on constants.
#include <optional>

#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

namespace guardpolicy::passes {
namespace {

int32_t InternBool(Program& p, bool b) {
  for (size_t i = 0; i < p.constants.size(); ++i) {
    if (p.constants[i].type.kind == TypeKind::kBool && p.constants[i].i == (b ? 1 : 0)) return int32_t(i);
  }
  p.constants.push_back({Type::Bool(), b ? 1 : 0, 0, {}});
  return static_cast<int32_t>(p.constants.size() - 1);
}

std::optional<bool> Apply(Opcode op, const Constant& a, const Constant& b) {
  switch (op) {
    case Opcode::kEqBool: case Opcode::kEqInt: return a.i == b.i;
    case Opcode::kNeBool: case Opcode::kNeInt: return a.i != b.i;
    case Opcode::kLtInt: return a.i < b.i;
    case Opcode::kLeInt: return a.i <= b.i;
    case Opcode::kGtInt: return a.i > b.i;
    case Opcode::kGeInt: return a.i >= b.i;
    case Opcode::kEqStr: return a.s == b.s;
    case Opcode::kNeStr: return a.s != b.s;
    case Opcode::kEqEnum: return (a.i >= 0 && b.i >= 0) ? a.i == b.i : a.s == b.s;
    case Opcode::kNeEnum: return !((a.i >= 0 && b.i >= 0) ? a.i == b.i : a.s == b.s);
    case Opcode::kContains: return a.s.find(b.s) != std::string::npos;
    case Opcode::kStartsWith: return a.s.rfind(b.s, 0) == 0;
    case Opcode::kEndsWith:
      return a.s.size() >= b.s.size() && a.s.compare(a.s.size() - b.s.size(), b.s.size(), b.s) == 0;
    default: return std::nullopt;
  }
}

// One rewrite at `pc` if a pattern matches; no window spans a jump target.
bool FoldAt(Program& p, size_t pc, const std::vector<bool>& target) {
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

bool FoldConstants(Program& p) {
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
