// disassembler.cpp: a readable listing of a Program.
#include <map>

#include <fmt/format.h>

#include "../parser/literals.h"
#include "guardpolicy/bytecode.h"

namespace guardpolicy {
namespace {

std::string ConstantText(const Constant& c) {
  switch (c.type.kind) {
    case TypeKind::kBool: return c.i ? "true" : "false";
    case TypeKind::kInt: return std::to_string(c.i);
    case TypeKind::kString: return parser_internal::QuoteString(c.s);
    case TypeKind::kEnum: return c.s;
    case TypeKind::kEnumSet: return fmt::format("{{bits {:#x}}}", c.bits);
    case TypeKind::kError: break;
  }
  return "?";
}

std::string SetText(const ConstSet& s) {
  std::string out = "{";
  auto add = [&out](const std::string& item) { out += (out.size() > 1 ? ", " : "") + item; };
  if (s.bits) add(fmt::format("bits {:#x}", s.bits));
  for (const auto& str : s.strings) add(parser_internal::QuoteString(str));
  for (const int64_t i : s.ints) add(std::to_string(i));
  return out + "}";
}

std::string SlotText(const Program& p, size_t slot);

std::string Operands(const Program& p, const Instruction& ins) {
  switch (ins.op) {
    case Opcode::kLoadField:
      return ins.a >= 0 && ins.a < int(p.fields.size()) ? fmt::format("{} ({})", ins.a, SlotText(p, ins.a))
                                                          : std::to_string(ins.a);
    case Opcode::kPushConst:
      return ins.a >= 0 && ins.a < int(p.constants.size())
                 ? fmt::format("{} ({})", ins.a, ConstantText(p.constants[ins.a]))
                 : std::to_string(ins.a);
    case Opcode::kInSet:
      return ins.a >= 0 && ins.a < int(p.sets.size()) ? fmt::format("{} {}", ins.a, SetText(p.sets[ins.a]))
                                                       : std::to_string(ins.a);
    case Opcode::kMatches:
      return ins.a >= 0 && ins.a < int(p.regexes.size()) ? fmt::format("{} /{}/", ins.a, p.regexes[ins.a])
                                                          : std::to_string(ins.a);
    case Opcode::kJump:
    case Opcode::kJumpIfFalse:
    case Opcode::kJumpIfTrue:
      return fmt::format("-> {}", ins.a);
    case Opcode::kBranchField:
    case Opcode::kBranchCompare:
    case Opcode::kBranchInSet:
    case Opcode::kBranchMatches: {
      std::string test = ins.a >= 0 && ins.a < int(p.fields.size()) ? SlotText(p, ins.a) : std::to_string(ins.a);
      if (ins.op == Opcode::kBranchCompare && ins.b >= 0 && ins.b < int(p.constants.size())) {
        test += fmt::format(" {} {}", OpcodeName(ins.x), ConstantText(p.constants[ins.b]));
      } else if (ins.op == Opcode::kBranchInSet && ins.b >= 0 && ins.b < int(p.sets.size())) {
        test += " in " + SetText(p.sets[ins.b]);
      } else if (ins.op == Opcode::kBranchMatches && ins.b >= 0 && ins.b < int(p.regexes.size())) {
        test += fmt::format(" matches /{}/", p.regexes[ins.b]);
      }
      return fmt::format("{} {} -> {}", test, ins.y ? "true" : "false", ins.c);
    }
    case Opcode::kDispatch: {
      if (ins.b < 0 || ins.b >= int(p.dispatch_tables.size())) return std::to_string(ins.b);
      // Members grouped by target: "-> 5: TENSOR_MATCH, SHAPE_ENV; -> 9: other".
      std::map<int32_t, int> count;
      for (const int32_t t : p.dispatch_tables[ins.b]) ++count[t];
      std::string out = ins.a >= 0 && ins.a < int(p.fields.size()) ? p.fields[ins.a] : "?";
      for (const auto& [target, n] : count) out += fmt::format(" | {} value{} -> {}", n, n == 1 ? "" : "s", target);
      return out;
    }
    case Opcode::kDecide: {
      const char* d = ins.a == 1 ? "drop" : "keep";
      if (ins.b < 0) return fmt::format("{} (default)", d);
      if (ins.b >= int(p.rules.size())) return fmt::format("{} rule {}", d, ins.b);
      const RuleInfo& r = p.rules[ins.b];
      return fmt::format("{} rule {} ({} at {}:{})", d, ins.b, r.policy, r.file, r.line);
    }
    case Opcode::kCall:
      return ins.a >= 0 && ins.a < int(p.functions.size())
                 ? fmt::format("{} ({}, {} argument{})", ins.a, p.functions[ins.a].name, ins.b, ins.b == 1 ? "" : "s")
                 : std::to_string(ins.a);
    default:
      return {};
  }
}

// A field slot, with a filter's bound parameters: `builtin.keep_tensor_guards(true)`.
std::string SlotText(const Program& p, size_t slot) {
  if (slot >= p.field_args.size() || p.field_args[slot].empty()) return p.fields[slot];
  std::string args;
  for (const Constant& c : p.field_args[slot]) args += (args.empty() ? "" : ", ") + ConstantText(c);
  return p.fields[slot] + "(" + args + ")";
}

}  // namespace

std::string Disassemble(const Program& p) {
  std::string out = fmt::format("policy {}: {} instructions, {} fields, {} rules, default {}\n",
                                p.policy_name, p.code.size(), p.fields.size(), p.rules.size(),
                                p.default_decision == Decision::kDrop ? "drop" : "keep");
  for (size_t i = 0; i < p.fields.size(); ++i) out += fmt::format("  field {}: {}\n", i, SlotText(p, i));
  for (size_t i = 0; i < p.functions.size(); ++i) out += fmt::format("  function {}: {}\n", i, p.functions[i].name);
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    const Instruction& ins = p.code[pc];
    out += fmt::format("{:4}  {:<16}{}\n", pc, OpcodeName(ins.op), Operands(p, ins));
  }
  return out;
}

}  // namespace guardpolicy
