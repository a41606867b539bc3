// type_dispatch.cpp: jump tables on guard_type so an entry visits only the rules that can
// match its guard type.
//
// The analysis gives, per rule, the guard types for which its condition can hold
// (OptimizeOptions::rule_type_masks; bit v = member v, bit 63 = any other name). Rules are
// laid out in order, so each rule's code is the span from its entry to the next live
// rule's entry. Two layouts:
//
//  - Specialized (tried first): guard types that the same rules admit form a class; one
//    DISPATCH at the start sends each class to its own block, a copy of the spans of just
//    the rules it admits, in order, ending in the default. An entry then takes one indirect
//    jump in all, and known_enum_values folds the guard_type tests that the block makes
//    certain. Used while the copies stay within kMaxGrowth times the code (and kMaxCode
//    instructions) and every jump out of a span goes to a later rule's entry or the default.
//  - Per rule: before each rule's code a DISPATCH whose table sends every type to the first
//    rule from there on that admits it (or to the default); jumps that went to a rule's
//    first instruction now go to its DISPATCH.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "guardpolicy/optimizer.h"
#include "jump_targets.h"

namespace guardpolicy::passes {

namespace {

constexpr size_t kMaxGrowth = 8;
constexpr size_t kMaxCode = 4096;

// The specialized layout (see the top of the file); false, leaving `p` as it was, when the
// program does not fit it. `live`: live rules in code order; spans [begin[k], end[k]); the
// last instruction is the default DECIDE and belongs to no span.
bool Specialize(ProgramImage& p, int32_t slot, int members, const std::vector<uint64_t>& masks,
                const std::vector<int>& live, const std::vector<int32_t>& begin, const std::vector<int32_t>& end) {
  const auto default_pc = static_cast<int32_t>(p.code.size() - 1);
  // Which span each pc belongs to (-1: none); which live rule starts at a pc.
  std::vector<int32_t> span_of(p.code.size(), -1), starts(p.code.size() + 1, -1);
  for (size_t k = 0; k < live.size(); ++k) {
    starts[begin[k]] = static_cast<int32_t>(k);
    for (int32_t pc = begin[k]; pc < end[k]; ++pc) span_of[pc] = static_cast<int32_t>(k);
  }
  // A jump may stay in its span, go to a later rule's entry or to the default; nothing else.
  for (size_t k = 0; k < live.size(); ++k) {
    for (int32_t pc = begin[k]; pc < end[k]; ++pc) {
      const Instruction& ins = p.code[pc];
      if (ins.op == Opcode::kDispatch) return false;  // a table inside a span is not re-targeted
      const int32_t* t = JumpTarget(ins);
      if (t == nullptr) continue;
      const bool inside = *t < end[k] && span_of[*t] == static_cast<int32_t>(k);
      const bool to_rule = *t < static_cast<int32_t>(p.code.size()) && starts[*t] > static_cast<int32_t>(k);
      if (!inside && !to_rule && *t != default_pc) return false;
    }
    // A span that runs off its end continues with the next rule, which must start there.
    const Opcode last = p.code[end[k] - 1].op;
    if (last != Opcode::kDecide && last != Opcode::kJump && end[k] != (k + 1 < live.size() ? begin[k + 1] : default_pc)) {
      return false;
    }
  }
  // Classes: guard types (0..members-1, and 63 for other names) with the same admitting rules.
  std::vector<std::vector<bool>> keys;
  std::vector<int> class_of(static_cast<size_t>(members) + 1);
  for (int v = 0; v <= members; ++v) {
    const int bit = v < members ? v : 63;
    std::vector<bool> key(live.size());
    for (size_t k = 0; k < live.size(); ++k) key[k] = (masks[live[k]] >> bit) & 1;
    auto it = std::find(keys.begin(), keys.end(), key);
    class_of[v] = static_cast<int>(it - keys.begin());
    if (it == keys.end()) keys.push_back(std::move(key));
  }
  size_t size = 1;
  for (const auto& key : keys) {
    for (size_t k = 0; k < live.size(); ++k) size += key[k] ? static_cast<size_t>(end[k] - begin[k]) : 0;
    size += 1;
  }
  if (size > kMaxCode || size > kMaxGrowth * p.code.size()) return false;

  std::vector<Instruction> code(1);  // [0]: the DISPATCH
  std::vector<int32_t> block_start(keys.size());
  std::vector<int32_t> first_copy(live.size(), -1);
  for (size_t c = 0; c < keys.size(); ++c) {
    block_start[c] = static_cast<int32_t>(code.size());
    // Where "continue with live rule j" lands in this block: its copy, or the next admitted one's.
    std::vector<int32_t> copy_at(live.size() + 1, -1);
    int32_t at = static_cast<int32_t>(code.size());
    for (size_t k = 0; k < live.size(); ++k) {
      if (!keys[c][k]) continue;
      copy_at[k] = at;
      at += end[k] - begin[k];
    }
    const int32_t block_default = at;
    copy_at[live.size()] = block_default;
    for (size_t k = live.size(); k-- > 0;) {
      if (copy_at[k] < 0) copy_at[k] = copy_at[k + 1];
    }
    for (size_t k = 0; k < live.size(); ++k) {
      if (!keys[c][k]) continue;
      if (first_copy[k] < 0) first_copy[k] = copy_at[k];
      for (int32_t pc = begin[k]; pc < end[k]; ++pc) {
        Instruction ins = p.code[pc];
        if (int32_t* t = JumpTarget(ins)) {
          if (*t == default_pc) *t = block_default;
          else if (*t < end[k] && span_of[*t] == static_cast<int32_t>(k)) *t = copy_at[k] + (*t - begin[k]);
          else *t = copy_at[starts[*t]];
        }
        code.push_back(ins);
      }
    }
    code.push_back(p.code[default_pc]);
  }
  std::vector<int32_t> table(static_cast<size_t>(members) + 1);
  for (int v = 0; v <= members; ++v) table[v] = block_start[class_of[v]];
  code[0] = Instruction{Opcode::kDispatch, slot, 0};
  for (size_t r = 0; r < p.rule_entry.size(); ++r) p.rule_entry[r] = -1;
  for (size_t k = 0; k < live.size(); ++k) p.rule_entry[live[k]] = first_copy[k];
  p.code = std::move(code);
  p.dispatch_tables = {std::move(table)};
  return true;
}

}  // namespace

bool DispatchOnGuardType(ProgramImage& p, const Schema& schema, const std::vector<uint64_t>& masks) {
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
  {
    const Instruction& last = p.code.back();
    std::vector<int32_t> begin(live.size()), end(live.size());
    for (size_t k = 0; k < live.size(); ++k) begin[k] = p.rule_entry[live[k]];
    for (size_t k = 0; k < live.size(); ++k) {
      end[k] = k + 1 < live.size() ? begin[k + 1] : tail - 1;  // the default DECIDE is no rule's
    }
    if (last.op == Opcode::kDecide && last.b == -1 && end.back() > begin.back() &&
        Specialize(p, slot, members, masks, live, begin, end)) {
      return true;
    }
  }

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
