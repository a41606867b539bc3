// test_runner.h: runs the `test` blocks of a policy file (`guardpolicy test`).
//
// Each `expect keep|drop { field: literal, ... }` is one entry given by field values
// (absent fields read as false, 0 or ""; enum fields take the member name as a string);
// the test's policy is compiled with its parameter defaults and must decide as expected.
#pragma once

#include <string>
#include <vector>

#include "guardpolicy/policy.h"

namespace guardpolicy {

struct ExpectationResult {
  std::string policy;
  SourceRange range;  // the `expect` line
  Decision expected = Decision::kKeep;
  Decision actual = Decision::kKeep;
  int rule = -1;  // the deciding rule (Program::rules index) or -1 for the default
  std::string rule_source;  // "file:line" of that rule, or of the default
  std::string error;        // a plugin could not give a field the program read ("" if none)
  bool passed() const { return error.empty() && expected == actual; }
};

// Lints `file` and runs its tests. Throws PolicyError when the file has errors.
std::vector<ExpectationResult> RunTests(Loader& loader, SourceFilePtr file);

}  // namespace guardpolicy
