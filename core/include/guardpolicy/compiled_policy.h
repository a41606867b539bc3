// compiled_policy.h: a loaded policy, its bytecode and what the runtime needs beside it. No
// syntax tree: a policy read from a `.gpolc` (artifact.h) is one too.
#pragma once

#include <string>
#include <utility>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/literal.h"
#include "guardpolicy/runtime_settings.h"

namespace guardpolicy {

// What the runtime needs beside the bytecode.
struct PolicyMeta {
  bool is_unsafe = false;
  std::string doc;
  RuntimeSettings runtime;  // the policy's runtime lines, as written
  ParamValues params;       // the values the parameters were bound to
};

// A compiled policy and what the runtime needs beside its bytecode. Immutable, thread-safe.
class CompiledPolicy {
 public:
  CompiledPolicy(Program program, PolicyMeta meta);

  const Program& program() const { return program_; }
  const std::string& name() const { return program_.policy_name(); }
  bool is_unsafe() const { return meta_.is_unsafe; }
  const std::string& doc() const { return meta_.doc; }
  const RuntimeSettings& runtime() const { return meta_.runtime; }
  OnError on_error() const { return meta_.runtime.EffectiveOnError(); }
  const PolicyMeta& meta() const { return meta_; }

 private:
  Program program_;
  PolicyMeta meta_;
};

}  // namespace guardpolicy
