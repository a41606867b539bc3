// jump_threading.cpp: follow chains of unconditional jumps and NOPs to their end.
#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

namespace guardpolicy::passes {

bool ThreadJumps(Program& p) {
  bool changed = false;
  auto& c = p.code;
  for (size_t pc = 0; pc < c.size(); ++pc) {
    int32_t* target = JumpTarget(c[pc]);
    if (target == nullptr) continue;
    int32_t t = *target;
    // Forward only, so each chain ends.
    while (static_cast<size_t>(t) < c.size() && (c[t].op == Opcode::kNop || c[t].op == Opcode::kJump)) {
      t = c[t].op == Opcode::kNop ? t + 1 : c[t].a;
    }
    if (t != *target) {
      *target = t;
      changed = true;
    }
    if (c[pc].op == Opcode::kJump && static_cast<size_t>(t) < c.size() && c[t].op == Opcode::kDecide) {
      c[pc] = c[t];  // a jump to a DECIDE is that DECIDE
      changed = true;
    }
  }
  return changed;
}

}  // namespace guardpolicy::passes
