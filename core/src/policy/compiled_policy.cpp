// compiled_policy.cpp: a loaded policy (compiled_policy.h), in the artifact's layer: a policy
// read from a `.gpolc` is built here without the front end.
#include "guardpolicy/compiled_policy.h"

namespace guardpolicy {

CompiledPolicy::CompiledPolicy(Program program, PolicyMeta meta)
    : program_(std::move(program)), meta_(std::move(meta)) {}

}  // namespace guardpolicy
