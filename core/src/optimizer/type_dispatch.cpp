// type_dispatch.cpp: jump tables on guard_type so an entry visits only the rules that can
// match its guard type.
//
// The analysis gives, per rule, the guard types for which its condition can hold
// (OptimizeOptions::rule_type_masks; bit v = member v, bit 63 = any other name). Before
// each rule's code the pass places a DISPATCH on guard_type whose table sends every type
// to the first rule from there on that admits it (or to the default). Jumps that went to a
// rule's first instruction now go to its DISPATCH. Rules are laid out in order, so each
// rule's code is the span from its entry to the next live rule's entry.
#include <algorithm>

#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

namespace guardpolicy::passes {

bool DispatchOnGuardType(Program& p, const Schema& schema, const std::vector<uint64_t>& masks) {
  const auto slot_it = std::find(p.fields.begin(), p.fields.end(), "guard_type");
  if (slot_it == p.fields.end() || masks.size() != p.rules.size() || p.rules.size() < 4) return false;
  const int32_t slot = static_cast<int32_t>(slot_it - p.fields.begin());
  const int members = static_cast<int>(schema.enums()[p.field_types[slot].enum_index].members.size());
  constexpr uint64_t kAll = ~uint64_t{0};
  if (std::all_of(masks.begin(), masks.end(), [](uint64_t m) { return m == kAll; })) return false;

  // Live rules in code order, with their spans [begin, end).
  std::vector<int> live;
  for (size_t r = 0; r < p.rules.size(); ++r) {
    if (p.rule_entry[r] >= 0) live.push_back(static_cast<int>(r));
  }
  if (live.empty()) return false;
  for (size_t k = 1; k < live.size(); ++k) {
    if (p.rule_entry[live[k]] <= p.rule_entry[live[k - 1]]) return false;  // not laid out in order
  }
  if (p.rule_entry[live[0]] != 0) return false;
  const int32_t tail = static_cast<int32_t>(p.code.size());  // end of the last span
  auto span_end = [&](size_t k) { return k + 1 < live.size() ? p.rule_entry[live[k + 1]] : tail; };
  // The default's code (after the last rule's span) keeps its place at the end.
  const int32_t rules_end = span_end(live.size() - 1);
  (void)rules_end;

  // New layout: for each live rule k: DISPATCH_k, then its span. old pc -> new pc.
  std::vector<int32_t> new_pc(p.code.size() + 1, -1);
  std::vector<int32_t> dispatch_pc(live.size());
  int32_t next = 0;
  for (size_t k = 0; k < live.size(); ++k) {
    dispatch_pc[k] = next++;
    for (int32_t pc = p.rule_entry[live[k]]; pc < span_end(k); ++pc) new_pc[pc] = next++;
  }
  new_pc[p.code.size()] = next;
  // Where "continue with live rule k" lands: its DISPATCH (k == live.size(): past the rules,
  // which cannot happen since the last span ends in the default DECIDE or a terminator).
  std::vector<int32_t> entry_to_k(p.code.size() + 1, -1);
  for (size_t k = 0; k < live.size(); ++k) entry_to_k[p.rule_entry[live[k]]] = static_cast<int32_t>(k);

  std::vector<Instruction> code(static_cast<size_t>(next));
  std::vector<std::vector<int32_t>> tables;
  for (size_t k = 0; k < live.size(); ++k) {
    std::vector<int32_t> table(static_cast<size_t>(members) + 1);
    for (int v = 0; v <= members; ++v) {
      const int bit = v < members ? v : 63;
      // The first live rule from k on that admits v: jump past its DISPATCH into its code.
      int32_t target = -1;
      for (size_t j = k; j < live.size() && target < 0; ++j) {
        if ((masks[live[j]] >> bit) & 1) target = new_pc[p.rule_entry[live[j]]];
      }
      // None admits v: the default decides, at the end of the last span.
      if (target < 0) target = new_pc[p.code.size() - 1];
      table[v] = target;
    }
    code[dispatch_pc[k]] = Instruction{Opcode::kDispatch, slot, static_cast<int32_t>(tables.size())};
    tables.push_back(std::move(table));
    for (int32_t pc = p.rule_entry[live[k]]; pc < span_end(k); ++pc) {
      Instruction ins = p.code[pc];
      if (int32_t* t = JumpTarget(ins)) {
        // A jump to a rule's first instruction continues through that rule's DISPATCH.
        *t = entry_to_k[*t] >= 0 ? dispatch_pc[entry_to_k[*t]] : new_pc[*t];
      }
      code[new_pc[pc]] = ins;
    }
  }
  // Only the last instruction can be the default DECIDE; a table entry "default" must
  // land on a DECIDE of the default.
  const Instruction& last = p.code.back();
  if (last.op != Opcode::kDecide || last.b != -1) return false;
  // A table with one target is a jump (a NOP when it is the next instruction); unused
  // tables are dropped.
  std::vector<std::vector<int32_t>> kept;
  for (size_t pc = 0; pc < code.size(); ++pc) {
    Instruction& ins = code[pc];
    if (ins.op != Opcode::kDispatch) continue;
    const auto& table = tables[ins.b];
    if (std::all_of(table.begin(), table.end(), [&](int32_t t) { return t == table.front(); })) {
      ins = table.front() == static_cast<int32_t>(pc + 1) ? Instruction{Opcode::kNop}
                                                          : Instruction{Opcode::kJump, table.front()};
    } else {
      ins.b = static_cast<int32_t>(kept.size());
      kept.push_back(table);
    }
  }
  if (kept.empty()) return false;  // nothing to gain: leave the program exactly as it was
  for (size_t k = 0; k < live.size(); ++k) p.rule_entry[live[k]] = new_pc[p.rule_entry[live[k]]];
  p.code = std::move(code);
  p.dispatch_tables = std::move(kept);
  return true;
}

}  // namespace guardpolicy::passes
