// unreachable_rules.cpp: a rule proven never to fire starts with a jump past its DECIDE;
// dead_code then removes its body.
#include "guardpolicy/optimizer.h"

namespace guardpolicy::passes {

bool RemoveUnreachableRules(ProgramImage& p, const std::vector<int>& rules) {
  bool changed = false;
  for (int rule : rules) {
    if (rule < 0 || static_cast<size_t>(rule) >= p.rule_entry.size()) continue;
    const int32_t entry = p.rule_entry[rule];
    if (entry < 0) continue;
    for (size_t pc = entry; pc < p.code.size(); ++pc) {
      if (p.code[pc].op == Opcode::kDecide && p.code[pc].b == rule) {
        p.code[entry] = {Opcode::kJump, static_cast<int32_t>(pc + 1), 0};
        changed = true;
        break;
      }
    }
  }
  return changed;
}

}  // namespace guardpolicy::passes
