// fuzz_common.h: what the fuzz targets share (the schema, a loader, a neutral entry).
#pragma once

#include <memory>
#include <string>

#include "guardpolicy/plugin_loader.h"
#include "guardpolicy/policy.h"
#include "guardpolicy/vm.h"

namespace guardpolicy::fuzz {

// The schema, torch's built-in filters and the `names` example plugin (a function, so the
// fuzzers reach CALL, and a filter with a parameter).
inline std::shared_ptr<const Schema> FuzzSchema() {
  static const auto schema = std::make_shared<const Schema>(
      Schema::FromFile(std::string(GUARDPOLICY_SOURCE_DATA_DIR) + "/schema/guard_entry.yaml")
          .WithPlugin(LoadPlugin(std::string(GUARDPOLICY_EXAMPLE_PLUGIN_DIR) + "/libgp_names.so")));
  return schema;
}

inline std::string StdDir() { return std::string(GUARDPOLICY_SOURCE_DATA_DIR) + "/std"; }

// Runs `program` on a few fixed entries: all fields absent, and all fields "set".
inline void RunOnSampleEntries(const Program& program) {
  std::vector<Value> empty(program.image().fields.size() + 1);
  Evaluate(program, empty.data());
  std::vector<Value> full(program.image().fields.size() + 1, Value{1, ~uint64_t{0}, "self.layers0.weight"});
  Evaluate(program, full.data());
}

}  // namespace guardpolicy::fuzz
