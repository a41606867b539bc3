// jump_targets.h: helpers shared by the passes.
#pragma once

#include <vector>

#include "guardpolicy/bytecode.h"

namespace guardpolicy::passes {

inline bool IsJump(Opcode op) {
  return op == Opcode::kJump || op == Opcode::kJumpIfFalse || op == Opcode::kJumpIfTrue;
}

// is_target[pc]: some jump lands on pc.
inline std::vector<bool> JumpTargets(const Program& p) {
  std::vector<bool> is_target(p.code.size() + 1, false);
  for (const Instruction& ins : p.code) {
    if (IsJump(ins.op) && ins.a >= 0 && static_cast<size_t>(ins.a) <= p.code.size()) is_target[ins.a] = true;
  }
  return is_target;
}

}  // namespace guardpolicy::passes
