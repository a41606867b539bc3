// program.cpp: opcode names and regex finalization.
#include <re2/re2.h>

#include "guardpolicy/bytecode.h"

namespace guardpolicy {

const char* OpcodeName(Opcode op) {
  static constexpr const char* kNames[] = {
      "LOAD_FIELD", "PUSH_CONST", "NOT",       "EQ_BOOL",     "NE_BOOL",   "EQ_INT",
      "NE_INT",     "LT_INT",     "LE_INT",    "GT_INT",      "GE_INT",    "EQ_STR",
      "NE_STR",     "EQ_ENUM",    "NE_ENUM",   "IN_SET",      "SET_HAS",   "CONTAINS",
      "STARTSWITH", "ENDSWITH",   "MATCHES",   "JUMP",        "JUMP_IF_FALSE",
      "JUMP_IF_TRUE", "DECIDE", "NOP"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Opcode::kCount_));
  const auto i = static_cast<size_t>(op);
  return i < static_cast<size_t>(Opcode::kCount_) ? kNames[i] : "INVALID";
}

std::string Program::Finalize() {
  compiled_regexes.clear();
  RE2::Options opts;
  opts.set_log_errors(false);
  for (const std::string& pattern : regexes) {
    auto re = std::make_shared<const RE2>(pattern, opts);
    if (!re->ok()) return "invalid pattern `" + pattern + "`: " + re->error();
    compiled_regexes.push_back(std::move(re));
  }
  return {};
}

}  // namespace guardpolicy
