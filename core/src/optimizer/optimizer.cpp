// optimizer.cpp: the pass manager; the verifier runs after every pass.
#include "guardpolicy/optimizer.h"

#include <functional>

#include "guardpolicy/verifier.h"

namespace guardpolicy {

std::optional<VerifyError> Optimize(ProgramImage& program, const Schema& schema, const OptimizeOptions& options) {
  if (options.level <= 0) return std::nullopt;
  const std::pair<const char*, std::function<bool()>> pipeline[] = {
      {"fold_constants", [&] { return options.fold_constants && passes::FoldConstants(program); }},
      {"enum_bitsets", [&] { return options.enum_bitsets && passes::EnumBitsets(program, schema); }},
      {"unreachable_rules",
       [&] { return options.unreachable_rules && passes::RemoveUnreachableRules(program, options.unreachable); }},
      {"jump_threading", [&] { return options.jump_threading && passes::ThreadJumps(program); }},
      {"fuse_branches", [&] { return options.fuse_branches && passes::FuseBranches(program); }},
      {"type_dispatch",
       [&] { return options.type_dispatch && passes::DispatchOnGuardType(program, schema, options.rule_type_masks); }},
      {"known_enum_values",
       [&] { return options.known_enum_values && passes::FoldKnownEnumValues(program, schema); }},
      // Again: known_enum_values leaves jumps to jumps and to the next instruction.
      {"jump_threading", [&] { return options.jump_threading && passes::ThreadJumps(program); }},
      {"merge_tails", [&] { return options.merge_tails && passes::MergeIdenticalTails(program); }},
      {"dead_code", [&] { return options.dead_code && passes::EliminateDeadCode(program); }},
  };
  for (const auto& [name, run] : pipeline) {
    if (!run()) continue;
    Verified verified = Verify(program);
    if (!verified.ok()) {
      verified.error->message = std::string("pass ") + name + ": " + verified.error->message;
      return verified.error;
    }
  }
  return std::nullopt;
}

}  // namespace guardpolicy
