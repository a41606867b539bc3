// dead_code.cpp: drop instructions no path reaches, and NOPs; remap targets.
#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

namespace guardpolicy::passes {
namespace {

std::vector<bool> Reachable(const ProgramImage& p) {
  std::vector<bool> live(p.code.size(), false);
  if (!p.code.empty()) live[0] = true;
  for (size_t pc = 0; pc < p.code.size(); ++pc) {  // jumps are forward: one sweep suffices
    if (!live[pc]) continue;
    const Instruction& ins = p.code[pc];
    const int32_t* t = JumpTarget(ins);
    if (t && static_cast<size_t>(*t) < live.size()) live[*t] = true;
    if (ins.op == Opcode::kDispatch) {
      for (const int32_t target : p.dispatch_tables[ins.b]) {
        if (static_cast<size_t>(target) < live.size()) live[target] = true;
      }
    }
    const bool falls_through = ins.op != Opcode::kJump && ins.op != Opcode::kDecide && ins.op != Opcode::kDispatch;
    if (falls_through && pc + 1 < live.size()) live[pc + 1] = true;
  }
  return live;
}

}  // namespace

bool EliminateDeadCode(ProgramImage& p) {
  const std::vector<bool> live = Reachable(p);
  std::vector<int32_t> new_index(p.code.size() + 1);
  std::vector<Instruction> kept;
  std::vector<bool> keep(p.code.size());
  size_t count = 0;
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    keep[pc] = live[pc] && p.code[pc].op != Opcode::kNop;
    count += keep[pc];
  }
  if (count == p.code.size()) return false;
  int32_t next = static_cast<int32_t>(count);
  new_index[p.code.size()] = next;
  for (size_t pc = p.code.size(); pc-- > 0;) {
    if (keep[pc]) --next;
    new_index[pc] = keep[pc] ? next : new_index[pc + 1];
  }
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    if (!keep[pc]) continue;
    Instruction ins = p.code[pc];
    if (int32_t* t = JumpTarget(ins)) *t = new_index[*t];
    kept.push_back(ins);
  }
  // A rule whose every DECIDE is gone has no code left; one whose test is gone but whose
  // DECIDE survives (jump threading copies DECIDEs) starts at that DECIDE.
  std::vector<int32_t> first_decide(p.rule_entry.size(), -1);
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    const Instruction& ins = p.code[pc];
    if (keep[pc] && ins.op == Opcode::kDecide && ins.b >= 0 && size_t(ins.b) < first_decide.size() &&
        first_decide[ins.b] < 0) {
      first_decide[ins.b] = new_index[pc];
    }
  }
  for (size_t rule = 0; rule < p.rule_entry.size(); ++rule) {
    int32_t& entry = p.rule_entry[rule];
    if (entry < 0) continue;
    if (first_decide[rule] < 0) entry = -1;
    else if (!keep[entry]) entry = live[entry] ? new_index[entry] : first_decide[rule];  // a NOP'd first test
    else entry = new_index[entry];
  }
  for (auto& table : p.dispatch_tables) {
    for (int32_t& target : table) target = new_index[target];
  }
  p.code = std::move(kept);
  return true;
}

}  // namespace guardpolicy::passes
