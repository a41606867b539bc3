// bytecode.h: the predicate bytecode a compiled policy runs as (docs/bytecode.md).
//
// A program is linear code over a small value stack. Jumps go only forward, so every run
// ends after at most size() instructions; every path ends in kDecide. Field loads read a
// slot of the entry view (ProgramImage::fields lists which schema field each slot holds), so
// a caller extracts only the fields a program reads. A ProgramImage is the code as data (what
// the compiler and optimizer write and a .gpolc holds); a Program is an image linked to a
// schema, verified and ready to run, immutable and safe to evaluate from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "guardpolicy/opcodes.h"
#include "guardpolicy/schema.h"
#include "guardpolicy/types.h"

namespace re2 {
class RE2;
}

namespace guardpolicy {

class Plugin;

// The opcodes, their operands and stack effects: opcodes.h (one table).
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
  const OpcodeInfo* info = FindOpcode(ins.op);
  if (info == nullptr) return nullptr;
  if (info->a == Operand::kTarget) return &ins.a;
  if (info->c == Operand::kTarget) return &ins.c;
  return nullptr;
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

// What a policy compiles to and a .gpolc file holds: code and tables, no live state. The
// compiler builds it, the optimizer passes rewrite it, Verify checks it, and Program::Link
// makes it runnable.
struct ProgramImage {
  std::string policy_name;
  std::vector<Instruction> code;
  // slot -> schema field name: a core field, a plugin field (`<plugin>.<field>`) or a
  // plugin filter (`<plugin>.<filter>`, a bool: true when the filter drops the entry).
  std::vector<std::string> fields;
  std::vector<Type> field_types;      // slot -> type
  // slot -> the bound parameters of a filter slot (one per declared parameter); empty for
  // fields. Same size as `fields`, or empty when no slot has any.
  std::vector<std::vector<Constant>> field_args;
  std::vector<FunctionRef> functions;
  std::vector<Constant> constants;
  std::vector<ConstSet> sets;
  std::vector<std::string> regexes;   // RE2 patterns
  std::vector<RuleInfo> rules;
  // kDispatch tables: one target pc per enum member, then one for any other value.
  std::vector<std::vector<int32_t>> dispatch_tables;
  // rule index -> pc of the first instruction of its test (-1 when the rule has no code),
  // kept up to date by every optimizer pass; used to remove rules proven unreachable.
  std::vector<int32_t> rule_entry;
  Decision default_decision = Decision::kKeep;
  std::string default_file;
  int default_line = 0;

  // The bound parameters of slot `slot` (none for a field).
  const std::vector<Constant>& FieldArgs(size_t slot) const;
};

// RE2's prefilter of one regex (re2::FilteredRE2 over that one regex): lower-case
// substrings of which every match contains at least one (none: no prefilter).
struct RegexFilter {
  static constexpr int kMinAtomLength = 3;
  std::vector<std::string> atoms;
  // Substrings of every atom (3 bytes or more; see program.cpp): a string that lacks one of
  // them holds no atom.
  std::vector<std::string> required;
};

// The plugin behind a FunctionRef or a filter slot.
struct BoundPlugin {
  std::shared_ptr<const Plugin> plugin;
  int decl = -1;  // index into the plugin's functions() or filters()
};

// Why an image cannot become a Program.
class LinkError : public std::runtime_error {
 public:
  enum class Kind : uint8_t {
    kUnbound,       // a field, filter or function the schema does not have (by name and type)
    kBadRegex,      // a pattern RE2 refuses
    kMalformed,     // the verifier refused the code
    kStackTooDeep,  // the verifier: deeper than kMaxStack (nested calls with many arguments)
  };
  LinkError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A program ready to run: an image that passed Verify, its regexes compiled (with RE2's
// prefilter), its fields, filters and functions bound by name and type to a schema and the
// plugins behind them. Only Link makes one and nothing changes it afterwards, so the VM
// never meets anything else; it may be evaluated from many threads at once.
class Program {
 public:
  // Throws LinkError.
  static Program Link(ProgramImage image, const Schema& schema);

  const ProgramImage& image() const { return image_; }
  const std::string& policy_name() const { return image_.policy_name; }
  int max_stack() const { return max_stack_; }  // the deepest stack a run reaches
  const re2::RE2& regex(size_t i) const { return *regexes_[i]; }
  const RegexFilter& regex_filter(size_t i) const { return regex_filters_[i]; }
  const BoundPlugin& bound_function(size_t i) const { return bound_functions_[i]; }

 private:
  Program() = default;
  void Bind(const Schema& schema);  // throws LinkError(kUnbound)
  void CompileRegexes();            // throws LinkError(kBadRegex)

  ProgramImage image_;
  int max_stack_ = 0;
  std::vector<std::shared_ptr<const re2::RE2>> regexes_;  // index-aligned with image_.regexes
  std::vector<RegexFilter> regex_filters_;
  std::vector<BoundPlugin> bound_functions_;
};

// Human-readable listing: one instruction per line with operands resolved (enum members
// by name, from `schema`, the one the program was compiled against), rule sources.
std::string Disassemble(const ProgramImage& program, const Schema& schema);

// Where a rule was written, as disasm, `check --explain` and Python's RuleRef print it:
// "policy at file:line".
std::string RuleLabel(const RuleInfo& rule);

}  // namespace guardpolicy
