// verifier.h: proves a Program safe to run before anything evaluates it.
//
// Checks, row by row of the opcode table (opcodes.h): every operand in bounds; operand
// types of every opcode over an abstract stack; the same stack shape wherever paths join;
// jumps strictly forward and inside the code; no path runs off the end (every path ends in
// kDecide); stack depth at most kMaxStack. Linear in the code size. Reads the program only;
// thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "guardpolicy/bytecode.h"

namespace guardpolicy {

inline constexpr int kMaxStack = 32;

// Why a program is refused. kStackTooDeep is the one an author can cause (nested calls with
// many arguments); any other is a defect of whatever made the program (or a corrupt file).
struct VerifyError {
  enum class Kind : uint8_t { kMalformed, kStackTooDeep };
  Kind kind = Kind::kMalformed;
  std::string message;  // "pc 7: jump target 3 is not forward"
};

// The types on the value stack before an instruction.
using StackShape = std::vector<TypeKind>;

struct Verified {
  std::optional<VerifyError> error;  // nullopt: the program is valid
  int max_stack = 0;                 // the deepest stack a run reaches (valid programs)
  // Per instruction, the stack before it (nullopt where no path reaches); empty unless
  // asked for and valid.
  std::vector<std::optional<StackShape>> shapes;

  bool ok() const { return !error; }
  // "" when valid, else the error's message.
  std::string message() const { return error ? error->message : std::string(); }
};

Verified Verify(const ProgramImage& program, bool with_shapes = false);

}  // namespace guardpolicy
