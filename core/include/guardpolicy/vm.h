// vm.h: evaluates a verified Program on one guard entry.
//
// `fields` points at Program::fields.size() values, slot-aligned (the entry view). The VM
// allocates nothing and never throws; it must only run programs that passed Verify().
#pragma once

#include "guardpolicy/bytecode.h"

namespace guardpolicy {

struct Outcome {
  Decision decision = Decision::kKeep;
  int32_t rule = -1;  // index into Program::rules, or -1 for the policy default
};

Outcome Evaluate(const Program& program, const Value* fields) noexcept;

}  // namespace guardpolicy
