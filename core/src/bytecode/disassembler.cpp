// disassembler.cpp: a readable listing of a Program.
#include <map>

#include <fmt/format.h>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/literal.h"

namespace guardpolicy {
namespace {

// One program's listing; enum members are named from the schema it was compiled against.
class Listing {
 public:
  Listing(const ProgramImage& p, const Schema& schema) : p_(p), schema_(schema) {}

  std::string Text() const {
    std::string out = fmt::format("policy {}: {} instructions, {} fields, {} rules, default {}\n",
                                  p_.policy_name, p_.code.size(), p_.fields.size(), p_.rules.size(),
                                  DecisionName(p_.default_decision));
    for (size_t i = 0; i < p_.fields.size(); ++i) out += fmt::format("  field {}: {}\n", i, Slot(i));
    for (size_t i = 0; i < p_.functions.size(); ++i) out += fmt::format("  function {}: {}\n", i, p_.functions[i].name);
    for (size_t pc = 0; pc < p_.code.size(); ++pc) {
      const Instruction& ins = p_.code[pc];
      out += fmt::format("{:4}  {:<16}{}\n", pc, OpcodeName(ins.op), Operands(ins));
    }
    return out;
  }

 private:
  // The members of enum `enum_index` whose bits are set, by name, in ordinal order (a bit
  // past the schema's members, which no verified program holds, as `#k`).
  void AddMembers(std::string& out, int enum_index, uint64_t bits) const {
    const bool known = enum_index >= 0 && enum_index < static_cast<int>(schema_.enums().size());
    for (int k = 0; k < 64; ++k) {
      if (!((bits >> k) & 1)) continue;
      const bool named = known && k < static_cast<int>(schema_.enums()[enum_index].members.size());
      Add(out, named ? schema_.enums()[enum_index].members[k] : fmt::format("#{}", k));
    }
  }
  static void Add(std::string& out, const std::string& item) { out += (out.size() > 1 ? ", " : "") + item; }

  std::string Constant(const guardpolicy::Constant& c) const {
    switch (c.type.kind) {
      case TypeKind::kBool: return c.i ? "true" : "false";
      case TypeKind::kInt: return std::to_string(c.i);
      case TypeKind::kString: return QuoteString(c.s);
      case TypeKind::kEnum: return c.s;
      case TypeKind::kEnumSet: {
        std::string out = "{";
        AddMembers(out, c.type.enum_index, c.bits);
        return out + "}";
      }
      case TypeKind::kError: break;
    }
    return "?";
  }

  // `{GLOBAL_STATE, SHAPE_ENV, "_vendor_MATCH"}`: known members by name, other names quoted.
  std::string Set(const ConstSet& s) const {
    std::string out = "{";
    if (s.elem.kind == TypeKind::kEnum) AddMembers(out, s.elem.enum_index, s.bits);
    for (const auto& str : s.strings) Add(out, QuoteString(str));
    for (const int64_t i : s.ints) Add(out, std::to_string(i));
    return out + "}";
  }

  // A field slot, with a filter's bound parameters: `builtin.keep_tensor_guards(true)`.
  std::string Slot(size_t slot) const {
    if (slot >= p_.field_args.size() || p_.field_args[slot].empty()) return p_.fields[slot];
    std::string args;
    for (const guardpolicy::Constant& c : p_.field_args[slot]) args += (args.empty() ? "" : ", ") + Constant(c);
    return p_.fields[slot] + "(" + args + ")";
  }

  // Operand `v`, by what it names (opcodes.h), with the entry it names when in range.
  std::string OperandText(Operand what, int32_t v) const {
    const ProgramImage& p = p_;
    const auto in = [v](size_t n) { return v >= 0 && static_cast<size_t>(v) < n; };
    switch (what) {
      case Operand::kSlot: return in(p.fields.size()) ? fmt::format("{} ({})", v, Slot(v)) : std::to_string(v);
      case Operand::kConst:
        return in(p.constants.size()) ? fmt::format("{} ({})", v, Constant(p.constants[v])) : std::to_string(v);
      case Operand::kSet: return in(p.sets.size()) ? fmt::format("{} {}", v, Set(p.sets[v])) : std::to_string(v);
      case Operand::kRegex: return in(p.regexes.size()) ? fmt::format("{} /{}/", v, p.regexes[v]) : std::to_string(v);
      case Operand::kTarget: return fmt::format("-> {}", v);
      default: return std::to_string(v);
    }
  }

  std::string Operands(const Instruction& ins) const {
    const ProgramImage& p = p_;
    const OpcodeInfo* info = FindOpcode(ins.op);
    if (info == nullptr) return {};
    switch (info->effect) {  // one operand: what the table says it names
      case Effect::kPush:
      case Effect::kUnary:
      case Effect::kJump:
      case Effect::kCondJump:
        return info->a == Operand::kNone ? std::string() : OperandText(info->a, ins.a);
      default: break;
    }
    switch (ins.op) {
      case Opcode::kBranchField:
      case Opcode::kBranchCompare:
      case Opcode::kBranchInSet:
      case Opcode::kBranchMatches: return Branch(ins);
      case Opcode::kDispatch: {
        if (ins.b < 0 || ins.b >= int(p.dispatch_tables.size())) return std::to_string(ins.b);
        // Members grouped by target: "| 2 values -> 5 | 61 values -> 9".
        std::map<int32_t, int> count;
        for (const int32_t t : p.dispatch_tables[ins.b]) ++count[t];
        std::string out = ins.a >= 0 && ins.a < int(p.fields.size()) ? p.fields[ins.a] : "?";
        for (const auto& [target, n] : count) out += fmt::format(" | {} value{} -> {}", n, n == 1 ? "" : "s", target);
        return out;
      }
      case Opcode::kDecide: {
        const char* d = IsDecision(ins.a) ? DecisionName(static_cast<Decision>(ins.a)) : "?";
        if (ins.b < 0) return fmt::format("{} (default)", d);
        if (ins.b >= int(p.rules.size())) return fmt::format("{} rule {}", d, ins.b);
        return fmt::format("{} rule {} ({})", d, ins.b, RuleLabel(p.rules[ins.b]));
      }
      case Opcode::kCall:
        return ins.a >= 0 && ins.a < int(p.functions.size())
                   ? fmt::format("{} ({}, {} argument{})", ins.a, p.functions[ins.a].name, ins.b, ins.b == 1 ? "" : "s")
                   : std::to_string(ins.a);
      default:
        return {};
    }
  }

  std::string Branch(const Instruction& ins) const {
    const ProgramImage& p = p_;
    std::string test = ins.a >= 0 && ins.a < int(p.fields.size()) ? Slot(ins.a) : std::to_string(ins.a);
    if (ins.op == Opcode::kBranchCompare && ins.b >= 0 && ins.b < int(p.constants.size())) {
      test += fmt::format(" {} {}", OpcodeName(ins.x), Constant(p.constants[ins.b]));
    } else if (ins.op == Opcode::kBranchInSet && ins.b >= 0 && ins.b < int(p.sets.size())) {
      test += " in " + Set(p.sets[ins.b]);
    } else if (ins.op == Opcode::kBranchMatches && ins.b >= 0 && ins.b < int(p.regexes.size())) {
      test += fmt::format(" matches /{}/", p.regexes[ins.b]);
    }
    return fmt::format("{} {} -> {}", test, ins.y ? "true" : "false", ins.c);
  }

  const ProgramImage& p_;
  const Schema& schema_;
};

}  // namespace

std::string RuleLabel(const RuleInfo& rule) { return fmt::format("{} at {}:{}", rule.policy, rule.file, rule.line); }

std::string Disassemble(const ProgramImage& program, const Schema& schema) {
  return Listing(program, schema).Text();
}

}  // namespace guardpolicy
