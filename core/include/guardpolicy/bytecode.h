// bytecode.h: the predicate bytecode a compiled policy runs as (docs/bytecode.md).
//
// A Program is linear code over a small value stack. Jumps go only forward, so every run
// ends after at most size() instructions; every path ends in kDecide. Field loads read a
// slot of the entry view (Program::fields lists which schema field each slot holds), so a
// caller extracts only the fields a program reads. Programs are immutable once built and
// verified, and may be evaluated from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guardpolicy/schema.h"
#include "guardpolicy/types.h"

namespace re2 {
class RE2;
}

namespace guardpolicy {

class Plugin;

enum class Opcode : uint8_t {
  kLoadField,    // a: slot                         push fields[a]
  kPushConst,    // a: constant index               push constants[a]
  kNot,          //                                 bool -> bool
  kEqBool,       //                                 bool bool -> bool
  kNeBool,
  kEqInt,        //                                 int int -> bool (and Ne/Lt/Le/Gt/Ge)
  kNeInt,
  kLtInt,
  kLeInt,
  kGtInt,
  kGeInt,
  kEqStr,        //                                 string string -> bool
  kNeStr,
  kEqEnum,       // ordinals when both known, else names
  kNeEnum,
  kInSet,        // a: set index                    value -> bool (member of sets[a])
  kSetHas,       //                                 set enum -> bool
  kContains,     //                                 string string -> bool (substring)
  kStartsWith,
  kEndsWith,
  kMatches,      // a: regex index                  string -> bool (RE2 partial match)
  kJump,         // a: target (> pc)
  kJumpIfFalse,  // a: target (> pc)                pops a bool
  kJumpIfTrue,   // a: target (> pc)                pops a bool
  kDecide,       // a: Decision, b: rule index or -1 (the policy default). Ends the run.
  kNop,          // does nothing; left by optimizer passes and removed by dead-code elimination
  // Fused test-and-branch instructions (the fuse_branches pass); the stack is unchanged.
  // y: 1 = jump when the test holds, 0 = jump when it does not; c: the target (> pc).
  kBranchField,    // a: bool slot
  kBranchCompare,  // a: slot, b: constant, x: the binary opcode (kEqBool..kEndsWith, kSetHas)
  kBranchInSet,    // a: slot, b: set
  kBranchMatches,  // a: string slot, b: regex
  // Jump table on an enum field (the type_dispatch pass): a: enum slot, b: table; jumps to
  // dispatch_tables[b][ordinal], or to its last entry for a value outside the enum.
  kDispatch,
  // A plugin function: a: index into Program::functions, b: its argument count; pops the
  // arguments (the first pushed first) and pushes the result (bool or int).
  kCall,
  kCount_,
};

const char* OpcodeName(Opcode op);

struct Instruction {
  Opcode op = Opcode::kDecide;
  int32_t a = 0;
  int32_t b = 0;
  int32_t c = 0;            // fused branches: jump target
  Opcode x = Opcode::kNop;  // kBranchCompare: the comparison
  uint8_t y = 0;            // fused branches: jump sense
};

// The jump target operand of `ins`, or null when it does not jump. (kDispatch jumps through
// a table; type_dispatch runs last before dead_code, which remaps its tables itself.)
inline int32_t* JumpTarget(Instruction& ins) {
  switch (ins.op) {
    case Opcode::kJump: case Opcode::kJumpIfFalse: case Opcode::kJumpIfTrue: return &ins.a;
    case Opcode::kBranchField: case Opcode::kBranchCompare: case Opcode::kBranchInSet:
    case Opcode::kBranchMatches: return &ins.c;
    default: return nullptr;
  }
}
inline const int32_t* JumpTarget(const Instruction& ins) { return JumpTarget(const_cast<Instruction&>(ins)); }

// Separates the unknown member names of an enum-set value in Value::s.
inline constexpr char kSetSeparator[] = "\x1f";

// A runtime value. Which members are meaningful depends on the static type:
//   bool: i (0/1); int: i; string: s; enum: i = ordinal (-1 unknown member), s = name;
//   enum set: bits (bit k = ordinal k present), s = names outside the schema, each
//   followed and the first preceded by kSetSeparator ("" when there are none).
struct Value {
  int64_t i = 0;
  uint64_t bits = 0;
  std::string_view s;
};

// A constant owns its string.
struct Constant {
  Type type;
  int64_t i = 0;
  uint64_t bits = 0;
  std::string s;
};

// A constant set for `in {...}`: enum members as a bit mask plus, for open enums, the
// unknown names; strings sorted; ints sorted.
struct ConstSet {
  Type elem;
  uint64_t bits = 0;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
};

// Where a kDecide came from, for explain and disasm.
struct RuleInfo {
  std::string policy;  // the policy that wrote the rule (after `use`, the used one)
  std::string file;
  int line = 0;
  int col = 0;
  Decision decision = Decision::kKeep;
};

// A plugin function a program calls (kCall), by qualified name and signature.
struct FunctionRef {
  std::string name;
  std::vector<Type> args;
  Type result;
};

// The plugin behind a FunctionRef or a filter slot, bound by Program::Bind.
struct BoundPlugin {
  std::shared_ptr<const Plugin> plugin;
  int decl = -1;  // index into the plugin's functions() or filters()
};

struct Program {
  std::string policy_name;
  std::vector<Instruction> code;
  // slot -> schema field name: a core field, a plugin field (`<plugin>.<field>`) or a
  // plugin filter (`<plugin>.<filter>`, a bool: true when the filter drops the entry).
  std::vector<std::string> fields;
  std::vector<Type> field_types;      // slot -> type
  // slot -> the bound parameters of a filter slot (one per declared parameter); empty for
  // fields. Same size as `fields`.
  std::vector<std::vector<Constant>> field_args;
  std::vector<FunctionRef> functions;
  std::vector<Constant> constants;
  std::vector<ConstSet> sets;
  std::vector<std::string> regexes;   // patterns; compiled by Finalize()
  // RE2's prefilter of regexes[i] (re2::FilteredRE2 over that one regex): lower-case
  // substrings of which every match contains at least one (none: no prefilter); computed
  // by Finalize().
  struct RegexFilter {
    std::vector<std::string> atoms;
    // Substrings of every atom (3 bytes or more; see program.cpp): a string that lacks
    // one of them holds no atom.
    std::vector<std::string> required;
  };
  static constexpr int kMinAtomLength = 3;
  std::vector<RegexFilter> regex_filters;
  std::vector<RuleInfo> rules;
  // kDispatch tables: one target pc per enum member, then one for any other value.
  std::vector<std::vector<int32_t>> dispatch_tables;
  // rule index -> pc of the first instruction of its test (-1 when the rule has no code),
  // kept up to date by every optimizer pass; used to remove rules proven unreachable.
  std::vector<int32_t> rule_entry;
  Decision default_decision = Decision::kKeep;
  std::string default_file;
  int default_line = 0;
  int max_stack = 0;                  // computed by the verifier

  // Compiled regexes, index-aligned with `regexes`; filled by Finalize().
  std::vector<std::shared_ptr<const re2::RE2>> compiled_regexes;
  // Plugins behind `functions` (index-aligned) and filter slots (slot-aligned; null plugin
  // for other slots); filled by Bind().
  std::vector<BoundPlugin> bound_functions;
  std::vector<BoundPlugin> bound_filters;
  // Compiles regexes. Returns "" or an error message (bad pattern).
  std::string Finalize();
  // Resolves every field, filter slot and function against `schema` (by name and type)
  // and binds the plugins behind them. Returns "" or what does not match.
  std::string Bind(const Schema& schema);
};

// Human-readable listing: one instruction per line with operands resolved (enum members
// by name, from `schema`, the one the program was compiled against), rule sources.
std::string Disassemble(const Program& program, const Schema& schema);

// Where a rule was written, as disasm, `check --explain` and Python's RuleRef print it:
// "policy at file:line".
std::string RuleLabel(const RuleInfo& rule);

}  // namespace guardpolicy
