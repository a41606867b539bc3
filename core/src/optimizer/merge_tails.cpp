// merge_tails.cpp: identical tails share one copy.
//
// A tail is a run of instructions that ends the path it is on (DECIDE, JUMP or DISPATCH).
// When an earlier run of at least two instructions equals a later one instruction for
// instruction (operands and absolute targets included), nothing jumps into its middle and
// the value stack has the same shape where the two runs start, the earlier run becomes one
// JUMP to the later copy (forward, as every jump must be) and
// NOPs that dead_code removes. A DECIDE keeps its rule index, so a merged tail still names
// the same rule for explain; tails of different rules never merge.
#include <map>
#include <tuple>

#include "guardpolicy/optimizer.h"
#include "guardpolicy/verifier.h"
#include "jump_targets.h"

namespace guardpolicy::passes {
namespace {

using Key = std::tuple<int, int32_t, int32_t, int32_t, int, int>;

Key KeyOf(const Instruction& ins) {
  return {static_cast<int>(ins.op), ins.a, ins.b, ins.c, static_cast<int>(ins.x), ins.y};
}

bool Ends(Opcode op) { return op == Opcode::kDecide || op == Opcode::kJump || op == Opcode::kDispatch; }

// pc is a jump target, a dispatch table entry or the entry of a rule's code.
std::vector<bool> Entered(const ProgramImage& p) {
  std::vector<bool> entered = JumpTargets(p);
  for (const auto& table : p.dispatch_tables) {
    for (const int32_t t : table) {
      if (t >= 0 && static_cast<size_t>(t) < entered.size()) entered[t] = true;
    }
  }
  for (const int32_t e : p.rule_entry) {
    if (e >= 0 && static_cast<size_t>(e) < entered.size()) entered[e] = true;
  }
  return entered;
}

}  // namespace

bool MergeIdenticalTails(ProgramImage& p) {
  auto& c = p.code;
  const std::vector<bool> entered = Entered(p);
  const std::vector<std::optional<StackShape>> shapes = Verify(p, /*with_shapes=*/true).shapes;
  if (shapes.size() != c.size()) return false;
  std::map<Key, size_t> last_end;  // an ending instruction -> the latest pc holding it
  std::vector<std::pair<size_t, size_t>> merges;  // (earlier end, later end), found back to front
  for (size_t j = c.size(); j-- > 0;) {
    if (!Ends(c[j].op)) continue;
    const Key key = KeyOf(c[j]);
    auto it = last_end.find(key);
    if (it != last_end.end()) merges.emplace_back(j, it->second);
    last_end[key] = j;
  }
  bool changed = false;
  std::vector<bool> rewritten(c.size(), false);
  for (const auto& [i, j] : merges) {
    // Grow the run backwards while both copies agree, the earlier one is not entered in its
    // middle and the two runs do not overlap.
    size_t k = 1;
    while (k <= i && i - k + 1 < j - k && !entered[i - k + 1] && !rewritten[i - k] && !rewritten[j - k] &&
           KeyOf(c[i - k]) == KeyOf(c[j - k]) && !Ends(c[i - k].op)) {
      ++k;
    }
    // Shorten the run until both copies start on the same stack shape.
    while (k >= 2 && shapes[i - k + 1] != shapes[j - k + 1]) --k;
    if (k < 2 || rewritten[i] || rewritten[j]) continue;
    const size_t start = i - k + 1;
    // Right before its copy, the earlier run simply falls through into it.
    c[start] = j - k + 1 == i + 1 ? Instruction{Opcode::kNop} : Instruction{Opcode::kJump, static_cast<int32_t>(j - k + 1)};
    for (size_t pc = start + 1; pc <= i; ++pc) c[pc] = Instruction{Opcode::kNop};
    for (size_t pc = start; pc <= i; ++pc) rewritten[pc] = true;
    changed = true;
  }
  return changed;
}

}  // namespace guardpolicy::passes
