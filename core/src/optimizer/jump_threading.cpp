// jump_threading.cpp: follow chains of unconditional jumps and NOPs to their end.
#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

namespace guardpolicy::passes {

namespace {

// Where a jump to `t` really continues: past NOPs and unconditional jumps (forward only,
// so each chain ends).
int32_t Final(const std::vector<Instruction>& c, int32_t t) {
  while (static_cast<size_t>(t) < c.size() && (c[t].op == Opcode::kNop || c[t].op == Opcode::kJump)) {
    t = c[t].op == Opcode::kNop ? t + 1 : c[t].a;
  }
  return t;
}

}  // namespace

bool ThreadJumps(ProgramImage& p) {
  bool changed = false;
  auto& c = p.code;
  for (size_t pc = 0; pc < c.size(); ++pc) {
    if (c[pc].op == Opcode::kDispatch) {  // (after type_dispatch) its table's targets too
      for (int32_t& target : p.dispatch_tables[c[pc].b]) {
        const int32_t t = Final(c, target);
        changed |= t != target;
        target = t;
      }
      continue;
    }
    int32_t* target = JumpTarget(c[pc]);
    if (target == nullptr) continue;
    const int32_t t = Final(c, *target);
    if (t != *target) {
      *target = t;
      changed = true;
    }
    if (c[pc].op == Opcode::kJump && static_cast<size_t>(t) < c.size() && c[t].op == Opcode::kDecide) {
      c[pc] = c[t];  // a jump to a DECIDE is that DECIDE
      changed = true;
    } else if (c[pc].op == Opcode::kJump && static_cast<size_t>(t) == pc + 1) {
      c[pc] = Instruction{Opcode::kNop};  // a jump to the next instruction
      changed = true;
    }
  }
  return changed;
}

}  // namespace guardpolicy::passes
