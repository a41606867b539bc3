// options.h: every limit of the front end in one place (and how its caller names a choice).
//
// Exceeding a limit is a diagnostic (GP0002, GP0003, GP0005), never a crash or a hang.
#pragma once

#include <cstddef>

namespace guardpolicy {

struct CompileOptions {
  size_t max_source_bytes = 1 << 20;  // 1 MiB of policy text per file
  int max_depth = 64;                 // nesting of ( ) and { } in one file
  int max_expr_depth = 256;           // depth of one condition's tree (a and b and ... counts each)
  int max_rules = 4096;               // rules per file, and per policy after `use` expansion
  int max_use_depth = 16;             // nested `use` chains
  int max_regex_bytes = 4096;         // length of one `matches`/`glob` pattern
  int max_analyzed_rules = 256;       // policies with more rules (after `use`) skip analysis
  int analysis_budget = 2000000;      // search nodes for all analysis questions of a policy
  int opt_level = 1;                  // 0: bytecode as generated; 1: every optimizer pass
  // How the user picks one policy of a file, for GP4001's help: Python's keyword by
  // default; the command line sets "--policy NAME".
  const char* policy_option = "policy=...";
};

}  // namespace guardpolicy
