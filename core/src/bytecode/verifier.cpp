// verifier.cpp: abstract interpretation of a Program over stack types.
#include "guardpolicy/verifier.h"

#include <optional>

#include <fmt/format.h>

namespace guardpolicy {
namespace {

using Stack = std::vector<TypeKind>;

class Verifier {
 public:
  explicit Verifier(Program& p) : p_(p), states_(p.code.size()) {}

  std::string Run() {
    if (p_.code.empty()) return "empty program";
    if (p_.fields.size() != p_.field_types.size()) return "field table and field types differ in size";
    if (p_.field_args.empty()) p_.field_args.resize(p_.fields.size());  // hand-built programs
    if (p_.field_args.size() != p_.fields.size()) return "field table and field arguments differ in size";
    for (const FunctionRef& f : p_.functions) {
      if (f.result.kind != TypeKind::kBool && f.result.kind != TypeKind::kInt) return "function result is not bool or int";
    }
    if (p_.compiled_regexes.size() != p_.regexes.size()) return "regexes not finalized";
    if (p_.rule_entry.size() != p_.rules.size()) return "rule entry table and rule table differ in size";
    for (const int32_t entry : p_.rule_entry) {
      if (entry < -1 || entry >= static_cast<int32_t>(p_.code.size())) return "rule entry out of range";
    }
    states_[0] = Stack{};
    for (pc_ = 0; pc_ < p_.code.size(); ++pc_) {
      if (!states_[pc_]) continue;  // unreachable: never executed
      Stack stack = *states_[pc_];
      const std::string err = Step(p_.code[pc_], stack);
      if (!err.empty()) return fmt::format("pc {}: {}", pc_, err);
    }
    p_.max_stack = max_depth_;
    return {};
  }

  std::vector<std::optional<Stack>>& states() { return states_; }

 private:
  std::string Pop(Stack& s, TypeKind want) {
    if (s.empty()) return "stack underflow";
    if (s.back() != want) return fmt::format("operand type {} where {} is needed", int(s.back()), int(want));
    s.pop_back();
    return {};
  }

  std::string Push(Stack& s, TypeKind t) {
    s.push_back(t);
    if (static_cast<int>(s.size()) > kMaxStack) return "stack deeper than the limit";
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    return {};
  }

  // Records the stack at a successor; shapes must agree where paths join.
  std::string FlowTo(size_t target, const Stack& s) {
    if (target >= p_.code.size()) return "control runs past the end of the code";
    if (!states_[target]) {
      states_[target] = s;
    } else if (*states_[target] != s) {
      return fmt::format("stack shapes differ where paths join at {}", target);
    }
    return {};
  }

  std::string Binary(Stack& s, TypeKind t) {
    std::string err = Pop(s, t);
    if (err.empty()) err = Pop(s, t);
    if (err.empty()) err = Push(s, TypeKind::kBool);
    return err;
  }

  static bool InRange(int32_t i, size_t n) { return i >= 0 && static_cast<size_t>(i) < n; }

  // Operand kinds (lhs, rhs) of a binary opcode, or nullopt when it is not one.
  static std::optional<std::pair<TypeKind, TypeKind>> BinaryOperands(Opcode op) {
    switch (op) {
      case Opcode::kEqBool: case Opcode::kNeBool: return std::pair{TypeKind::kBool, TypeKind::kBool};
      case Opcode::kEqInt: case Opcode::kNeInt: case Opcode::kLtInt:
      case Opcode::kLeInt: case Opcode::kGtInt: case Opcode::kGeInt: return std::pair{TypeKind::kInt, TypeKind::kInt};
      case Opcode::kEqStr: case Opcode::kNeStr: case Opcode::kContains:
      case Opcode::kStartsWith: case Opcode::kEndsWith: return std::pair{TypeKind::kString, TypeKind::kString};
      case Opcode::kEqEnum: case Opcode::kNeEnum: return std::pair{TypeKind::kEnum, TypeKind::kEnum};
      case Opcode::kSetHas: return std::pair{TypeKind::kEnumSet, TypeKind::kEnum};
      default: return std::nullopt;
    }
  }

  // A jump table on an enum field: one forward target per member plus one; ends the path.
  std::string Dispatch(const Instruction& ins, const Stack& s) {
    if (!InRange(ins.a, p_.fields.size())) return "field slot out of range";
    const Type& t = p_.field_types[ins.a];
    if (t.kind != TypeKind::kEnum) return "dispatch on a field that is not an enum";
    if (!InRange(ins.b, p_.dispatch_tables.size())) return "dispatch table out of range";
    const auto& table = p_.dispatch_tables[ins.b];
    if (table.empty()) return "empty dispatch table";
    for (const int32_t target : table) {
      if (target <= static_cast<int32_t>(pc_)) return fmt::format("jump target {} is not forward", target);
      std::string err = FlowTo(target, s);
      if (!err.empty()) return err;
    }
    return {};
  }

  // A fused test-and-branch: operands, types, a forward target; the stack is unchanged.
  std::string FusedBranch(const Instruction& ins, const Stack& s) {
    if (!InRange(ins.a, p_.fields.size())) return "field slot out of range";
    if (ins.y > 1) return "branch sense is neither 0 nor 1";
    if (ins.c <= static_cast<int32_t>(pc_)) return fmt::format("jump target {} is not forward", ins.c);
    const TypeKind field = p_.field_types[ins.a].kind;
    switch (ins.op) {
      case Opcode::kBranchField:
        if (field != TypeKind::kBool) return "branch on a field that is not bool";
        break;
      case Opcode::kBranchCompare: {
        const auto operands = BinaryOperands(ins.x);
        if (!operands) return "fused comparison is not a binary opcode";
        if (!InRange(ins.b, p_.constants.size())) return "constant index out of range";
        if (operands->first != field || operands->second != p_.constants[ins.b].type.kind) {
          return "fused comparison operand types do not match";
        }
        break;
      }
      case Opcode::kBranchInSet:
        if (!InRange(ins.b, p_.sets.size())) return "set index out of range";
        if (p_.sets[ins.b].elem.kind != field) return "set element type does not match the field";
        break;
      default:
        if (!InRange(ins.b, p_.regexes.size())) return "regex index out of range";
        if (field != TypeKind::kString) return "regex on a field that is not a string";
        break;
    }
    std::string err = FlowTo(ins.c, s);
    if (err.empty()) err = FlowTo(pc_ + 1, s);
    return err;
  }

  std::string Step(const Instruction& ins, Stack& s) {
    std::string err;
    switch (ins.op) {
      case Opcode::kLoadField:
        if (!InRange(ins.a, p_.fields.size())) return "field slot out of range";
        err = Push(s, p_.field_types[ins.a].kind);
        break;
      case Opcode::kPushConst:
        if (!InRange(ins.a, p_.constants.size())) return "constant index out of range";
        err = Push(s, p_.constants[ins.a].type.kind);
        break;
      case Opcode::kNot:
        err = Pop(s, TypeKind::kBool);
        if (err.empty()) err = Push(s, TypeKind::kBool);
        break;
      case Opcode::kEqBool: case Opcode::kNeBool: err = Binary(s, TypeKind::kBool); break;
      case Opcode::kEqInt: case Opcode::kNeInt: case Opcode::kLtInt:
      case Opcode::kLeInt: case Opcode::kGtInt: case Opcode::kGeInt:
        err = Binary(s, TypeKind::kInt);
        break;
      case Opcode::kEqStr: case Opcode::kNeStr: case Opcode::kContains:
      case Opcode::kStartsWith: case Opcode::kEndsWith:
        err = Binary(s, TypeKind::kString);
        break;
      case Opcode::kEqEnum: case Opcode::kNeEnum: err = Binary(s, TypeKind::kEnum); break;
      case Opcode::kInSet: {
        if (!InRange(ins.a, p_.sets.size())) return "set index out of range";
        err = Pop(s, p_.sets[ins.a].elem.kind);
        if (err.empty()) err = Push(s, TypeKind::kBool);
        break;
      }
      case Opcode::kSetHas:
        err = Pop(s, TypeKind::kEnum);
        if (err.empty()) err = Pop(s, TypeKind::kEnumSet);
        if (err.empty()) err = Push(s, TypeKind::kBool);
        break;
      case Opcode::kMatches:
        if (!InRange(ins.a, p_.regexes.size())) return "regex index out of range";
        err = Pop(s, TypeKind::kString);
        if (err.empty()) err = Push(s, TypeKind::kBool);
        break;
      case Opcode::kJump:
        if (ins.a <= static_cast<int32_t>(pc_)) return fmt::format("jump target {} is not forward", ins.a);
        return FlowTo(ins.a, s);
      case Opcode::kJumpIfFalse:
      case Opcode::kJumpIfTrue:
        if (ins.a <= static_cast<int32_t>(pc_)) return fmt::format("jump target {} is not forward", ins.a);
        err = Pop(s, TypeKind::kBool);
        if (err.empty()) err = FlowTo(ins.a, s);
        break;
      case Opcode::kNop:
        break;
      case Opcode::kCall: {
        if (!InRange(ins.a, p_.functions.size())) return "function index out of range";
        const FunctionRef& f = p_.functions[ins.a];
        if (ins.b != static_cast<int32_t>(f.args.size())) return "argument count does not match the function";
        for (size_t k = f.args.size(); k-- > 0 && err.empty();) err = Pop(s, f.args[k].kind);
        if (err.empty()) err = Push(s, f.result.kind);
        break;
      }
      case Opcode::kBranchField:
      case Opcode::kBranchCompare:
      case Opcode::kBranchInSet:
      case Opcode::kBranchMatches:
        return FusedBranch(ins, s);
      case Opcode::kDispatch:
        return Dispatch(ins, s);
      case Opcode::kDecide:
        if (ins.a != 0 && ins.a != 1) return "decision is neither keep nor drop";
        if (ins.b < -1 || ins.b >= static_cast<int32_t>(p_.rules.size())) return "rule index out of range";
        return {};  // ends the path
      default:
        return fmt::format("unknown opcode {}", static_cast<int>(ins.op));
    }
    if (!err.empty()) return err;
    return FlowTo(pc_ + 1, s);
  }

  Program& p_;
  std::vector<std::optional<Stack>> states_;
  size_t pc_ = 0;
  int max_depth_ = 0;
};

}  // namespace

std::string Verify(Program& program) { return Verifier(program).Run(); }

std::vector<std::optional<StackShape>> StackShapes(Program& program) {
  Verifier v(program);
  if (!v.Run().empty()) return {};
  return std::move(v.states());
}

}  // namespace guardpolicy
