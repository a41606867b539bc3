// optimizer.h: bytecode optimization passes (-O1), each in its own file, each switchable.
//
//   fold_constants     operators on constants become constants; branches on constants
//                      become jumps or nothing
//   enum_bitsets       `in {...}` over enum members tests a 64-bit mask, not names
//   unreachable_rules  rules the checker proved never fire lose their code
//   jump_threading     jumps to jumps go straight to the end; a jump to a DECIDE is the DECIDE
//   fuse_branches      load + test + conditional jump become one test-and-branch instruction
//   type_dispatch      jump tables on guard_type: an entry visits only rules that admit its type
//   merge_tails        an earlier run of instructions equal to a later one that ends a path
//                      jumps to the later copy instead
//   dead_code          unreachable instructions and NOPs are removed, targets remapped
// Short-circuit layout is the code generator's (conditions compile to branches).
// The verifier runs after every pass; a pass that breaks a program is an internal error.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/schema.h"
#include "guardpolicy/verifier.h"

namespace guardpolicy {

struct OptimizeOptions {
  int level = 1;                       // 0: no passes; 1: all passes below that are on
  bool fold_constants = true;
  bool enum_bitsets = true;
  bool unreachable_rules = true;
  bool jump_threading = true;
  bool fuse_branches = true;
  bool type_dispatch = true;
  bool known_enum_values = true;
  bool merge_tails = true;
  bool dead_code = true;
  std::vector<int> unreachable;        // rule indices proven never to fire (analysis)
  std::vector<uint64_t> rule_type_masks;  // per rule: guard types it can match (analysis)
};

// Runs the enabled passes on a verified image, the verifier after each. Returns nullopt, or
// the verifier's error after a pass ("pass NAME: ..."): a defect of that pass.
std::optional<VerifyError> Optimize(ProgramImage& program, const Schema& schema, const OptimizeOptions& options);

namespace passes {
// Each returns true when it changed the program.
bool FoldConstants(ProgramImage& p);
bool EnumBitsets(ProgramImage& p, const Schema& schema);
bool RemoveUnreachableRules(ProgramImage& p, const std::vector<int>& rules);
bool ThreadJumps(ProgramImage& p);
bool FuseBranches(ProgramImage& p);
bool DispatchOnGuardType(ProgramImage& p, const Schema& schema, const std::vector<uint64_t>& masks);
bool FoldKnownEnumValues(ProgramImage& p, const Schema& schema);
bool MergeIdenticalTails(ProgramImage& p);
bool EliminateDeadCode(ProgramImage& p);
}  // namespace passes

}  // namespace guardpolicy
