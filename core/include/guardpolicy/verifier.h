// verifier.h: proves a Program safe to run before anything evaluates it.
//
// Checks: every operand in bounds; operand types of every opcode over an abstract stack;
// the same stack shape wherever paths join; jumps strictly forward and inside the code;
// no path runs off the end (every path ends in kDecide); stack depth at most kMaxStack.
// Linear in the code size. Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "guardpolicy/bytecode.h"

namespace guardpolicy {

inline constexpr int kMaxStack = 32;

// Returns "" when `program` is valid, else the first problem ("pc 7: jump target 3 is not
// forward"). On success sets program.max_stack.
std::string Verify(Program& program);

// The types on the value stack before each instruction of a valid program (nullopt where
// no path reaches), as the verifier computes them; empty when the program is not valid.
using StackShape = std::vector<TypeKind>;
std::vector<std::optional<StackShape>> StackShapes(Program& program);

}  // namespace guardpolicy
