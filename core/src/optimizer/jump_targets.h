// jump_targets.h: helpers shared by the passes.
#pragma once

#include <vector>

#include "guardpolicy/bytecode.h"

namespace guardpolicy::passes {

inline bool IsJump(Opcode op) {
  Instruction probe;
  probe.op = op;
  return JumpTarget(probe) != nullptr;
}

// is_target[pc]: some jump lands on pc.
inline std::vector<bool> JumpTargets(const ProgramImage& p) {
  std::vector<bool> is_target(p.code.size() + 1, false);
  for (const Instruction& ins : p.code) {
    const int32_t* t = JumpTarget(ins);
    if (t && *t >= 0 && static_cast<size_t>(*t) <= p.code.size()) is_target[*t] = true;
  }
  return is_target;
}

}  // namespace guardpolicy::passes
