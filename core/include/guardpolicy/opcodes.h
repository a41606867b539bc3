// opcodes.h: the one table of opcodes (docs/bytecode.md, "Instructions").
//
// Each row gives an opcode's listing name, how it moves the value stack and control, what
// each of its operands a, b, c names, the operand types it pops, and, for the operators, what
// it computes over the two Values `a` and `b` it pops. The Opcode enum, the VM's operators,
// the verifier's checks and the disassembler's names and operands all come from this table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "guardpolicy/types.h"

namespace guardpolicy {

// How an opcode moves the stack and control.
enum class Effect : uint8_t {
  kPush,      // pushes the value its operand a names (a field slot or a constant)
  kUnary,     // pops a value of type `lhs` (a set's element type for kInSet), pushes a bool
  kBinary,    // pops `rhs` then `lhs`, pushes a bool: the row's expression
  kJump,      // continues at a
  kCondJump,  // pops a bool; continues at a when it is true (kJumpIfTrue) or false (kJumpIfFalse)
  kDecide,    // ends the run with decision a, by rule b (-1: the policy default)
  kNone,      // does nothing
  kBranch,    // a test of field slot a against b, continuing at c when it equals y; the stack is unchanged
  kDispatch,  // continues at dispatch_tables[b][ordinal of enum slot a]; ends the path
  kCall,      // pops b arguments of plugin function a, pushes its result
};

// What an instruction operand names.
enum class Operand : uint8_t {
  kNone,      // unused
  kSlot,      // a field slot: Program::fields
  kConst,     // Program::constants
  kSet,       // Program::sets
  kRegex,     // Program::regexes
  kTarget,    // a pc after this one
  kTable,     // Program::dispatch_tables
  kFunction,  // Program::functions
  kArgCount,  // the argument count of the function a names
  kDecision,  // a Decision: 0 keep, 1 drop, 2 watch
  kRule,      // Program::rules, or -1 for the policy default
};

// X(opcode, NAME, effect, a, b, c, lhs, rhs, expression over Values a and b)
// (the order is the byte value in a .gpolc file: append only)
#define GP_OPCODES(X)                                                                          \
  X(kLoadField, "LOAD_FIELD", kPush, kSlot, kNone, kNone, kError, kError, false)               \
  X(kPushConst, "PUSH_CONST", kPush, kConst, kNone, kNone, kError, kError, false)              \
  X(kNot, "NOT", kUnary, kNone, kNone, kNone, kBool, kError, false)                            \
  X(kEqBool, "EQ_BOOL", kBinary, kNone, kNone, kNone, kBool, kBool, a.i == b.i)                \
  X(kNeBool, "NE_BOOL", kBinary, kNone, kNone, kNone, kBool, kBool, a.i != b.i)                \
  X(kEqInt, "EQ_INT", kBinary, kNone, kNone, kNone, kInt, kInt, a.i == b.i)                    \
  X(kNeInt, "NE_INT", kBinary, kNone, kNone, kNone, kInt, kInt, a.i != b.i)                    \
  X(kLtInt, "LT_INT", kBinary, kNone, kNone, kNone, kInt, kInt, a.i < b.i)                     \
  X(kLeInt, "LE_INT", kBinary, kNone, kNone, kNone, kInt, kInt, a.i <= b.i)                    \
  X(kGtInt, "GT_INT", kBinary, kNone, kNone, kNone, kInt, kInt, a.i > b.i)                     \
  X(kGeInt, "GE_INT", kBinary, kNone, kNone, kNone, kInt, kInt, a.i >= b.i)                    \
  X(kEqStr, "EQ_STR", kBinary, kNone, kNone, kNone, kString, kString, (StrEq(a.s, b.s)))       \
  X(kNeStr, "NE_STR", kBinary, kNone, kNone, kNone, kString, kString, (!StrEq(a.s, b.s)))      \
  /* enums: ordinals when both are known members, else names */                                \
  X(kEqEnum, "EQ_ENUM", kBinary, kNone, kNone, kNone, kEnum, kEnum, (EnumEqual(a, b)))         \
  X(kNeEnum, "NE_ENUM", kBinary, kNone, kNone, kNone, kEnum, kEnum, (!EnumEqual(a, b)))        \
  X(kInSet, "IN_SET", kUnary, kSet, kNone, kNone, kError, kError, false)                       \
  X(kSetHas, "SET_HAS", kBinary, kNone, kNone, kNone, kEnumSet, kEnum, (SetHas(a, b)))         \
  X(kContains, "CONTAINS", kBinary, kNone, kNone, kNone, kString, kString, (Contains(a.s, b.s))) \
  X(kStartsWith, "STARTSWITH", kBinary, kNone, kNone, kNone, kString, kString,                 \
    (StartsWith(a.s, b.s)))                                                                    \
  X(kEndsWith, "ENDSWITH", kBinary, kNone, kNone, kNone, kString, kString, (EndsWith(a.s, b.s))) \
  /* RE2 partial match, after RE2's prefilter */                                               \
  X(kMatches, "MATCHES", kUnary, kRegex, kNone, kNone, kString, kError, false)                 \
  X(kJump, "JUMP", kJump, kTarget, kNone, kNone, kError, kError, false)                        \
  X(kJumpIfFalse, "JUMP_IF_FALSE", kCondJump, kTarget, kNone, kNone, kBool, kError, false)     \
  X(kJumpIfTrue, "JUMP_IF_TRUE", kCondJump, kTarget, kNone, kNone, kBool, kError, false)       \
  X(kDecide, "DECIDE", kDecide, kDecision, kRule, kNone, kError, kError, false)                \
  /* left by optimizer passes, removed by dead-code elimination */                             \
  X(kNop, "NOP", kNone, kNone, kNone, kNone, kError, kError, false)                            \
  /* fused test-and-branch (the fuse_branches pass); y: 1 = jump when the test holds */        \
  X(kBranchField, "BRANCH_FIELD", kBranch, kSlot, kNone, kTarget, kBool, kError, false)        \
  /* x: the operator (an Effect::kBinary opcode) between the field and constant b */           \
  X(kBranchCompare, "BRANCH_COMPARE", kBranch, kSlot, kConst, kTarget, kError, kError, false)  \
  X(kBranchInSet, "BRANCH_IN_SET", kBranch, kSlot, kSet, kTarget, kError, kError, false)       \
  X(kBranchMatches, "BRANCH_MATCHES", kBranch, kSlot, kRegex, kTarget, kString, kError, false) \
  /* a jump table on an enum field (the type_dispatch pass): one target per member, then */    \
  /* one for any other value */                                                                \
  X(kDispatch, "DISPATCH", kDispatch, kSlot, kTable, kNone, kEnum, kError, false)              \
  X(kCall, "CALL", kCall, kFunction, kArgCount, kNone, kError, kError, false)

enum class Opcode : uint8_t {
#define GP_OPCODE_ENUM(op, ...) op,
  GP_OPCODES(GP_OPCODE_ENUM)
#undef GP_OPCODE_ENUM
  kCount_,
};

struct OpcodeInfo {
  const char* name;  // in listings
  Effect effect;
  Operand a, b, c;
  TypeKind lhs, rhs;  // the operand types it pops (kError: none, or given by an operand)
};

inline constexpr OpcodeInfo kOpcodeTable[] = {
#define GP_OPCODE_INFO(op, name, effect, a, b, c, lhs, rhs, expr) \
  {name, Effect::effect, Operand::a, Operand::b, Operand::c, TypeKind::lhs, TypeKind::rhs},
    GP_OPCODES(GP_OPCODE_INFO)
#undef GP_OPCODE_INFO
};
static_assert(std::size(kOpcodeTable) == static_cast<size_t>(Opcode::kCount_));

// The row of `op`, or null for a byte that is no opcode.
inline constexpr const OpcodeInfo* FindOpcode(Opcode op) {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOpcodeTable) ? &kOpcodeTable[i] : nullptr;
}
inline constexpr bool IsBinary(Opcode op) {
  const OpcodeInfo* info = FindOpcode(op);
  return info != nullptr && info->effect == Effect::kBinary;
}

// Expands to its other arguments for a row of effect `effect` only: a filter over
// GP_OPCODES rows (the VM's operator cases).
#define GP_IF_EFFECT_kBinary(...) __VA_ARGS__
#define GP_IF_EFFECT_kPush(...)
#define GP_IF_EFFECT_kUnary(...)
#define GP_IF_EFFECT_kJump(...)
#define GP_IF_EFFECT_kCondJump(...)
#define GP_IF_EFFECT_kDecide(...)
#define GP_IF_EFFECT_kNone(...)
#define GP_IF_EFFECT_kBranch(...)
#define GP_IF_EFFECT_kDispatch(...)
#define GP_IF_EFFECT_kCall(...)
#define GP_IF_BINARY(effect, ...) GP_IF_EFFECT_##effect(__VA_ARGS__)

}  // namespace guardpolicy
