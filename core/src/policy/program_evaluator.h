// program_evaluator.h: the facade's RuleEvaluator (evaluator.h): linked rules compiled and
// run in the VM, as a loaded policy runs them (no optimizer passes).
#pragma once

#include "guardpolicy/evaluator.h"
#include "guardpolicy/options.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

class ProgramEvaluator final : public RuleEvaluator {
 public:
  ProgramEvaluator(const Schema& schema, const CompileOptions& options) : schema_(schema), options_(options) {}

  std::vector<std::optional<Decided>> Decide(const LinkedPolicy& linked,
                                             const std::vector<EntryLiterals>& entries) override;

 private:
  const Schema& schema_;
  const CompileOptions& options_;
};

}  // namespace guardpolicy
