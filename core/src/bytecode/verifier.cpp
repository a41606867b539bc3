// verifier.cpp: abstract interpretation of a program over stack types, driven by the opcode
// table (opcodes.h): each row's operands are checked by what they name, its stack effect by
// its Effect and operand types.
#include "guardpolicy/verifier.h"

#include <optional>

#include <fmt/format.h>

namespace guardpolicy {
namespace {

using Stack = std::vector<TypeKind>;

// A problem at one instruction: the message and whether it is the depth limit.
struct Problem {
  std::string message;
  bool too_deep = false;
  explicit operator bool() const { return !message.empty(); }
};

class Verifier {
 public:
  explicit Verifier(const ProgramImage& p) : p_(p), states_(p.code.size()) {}

  Verified Run(bool with_shapes) {
    Verified out;
    if (std::string err = CheckTables(); !err.empty()) {
      out.error = VerifyError{VerifyError::Kind::kMalformed, err};
      return out;
    }
    states_[0] = Stack{};
    for (pc_ = 0; pc_ < p_.code.size(); ++pc_) {
      if (!states_[pc_]) continue;  // unreachable: never executed
      Stack stack = *states_[pc_];
      if (Problem problem = Step(p_.code[pc_], stack)) {
        out.error = VerifyError{problem.too_deep ? VerifyError::Kind::kStackTooDeep : VerifyError::Kind::kMalformed,
                                fmt::format("pc {}: {}", pc_, problem.message)};
        return out;
      }
    }
    out.max_stack = max_depth_;
    if (with_shapes) out.shapes = std::move(states_);
    return out;
  }

 private:
  std::string CheckTables() const {
    if (p_.code.empty()) return "empty program";
    if (p_.fields.size() != p_.field_types.size()) return "field table and field types differ in size";
    if (!p_.field_args.empty() && p_.field_args.size() != p_.fields.size()) {
      return "field table and field arguments differ in size";
    }
    for (const FunctionRef& f : p_.functions) {
      if (f.result.kind != TypeKind::kBool && f.result.kind != TypeKind::kInt) return "function result is not bool or int";
    }
    if (p_.rule_entry.size() != p_.rules.size()) return "rule entry table and rule table differ in size";
    for (const int32_t entry : p_.rule_entry) {
      if (entry < -1 || entry >= static_cast<int32_t>(p_.code.size())) return "rule entry out of range";
    }
    return {};
  }

  Problem Pop(Stack& s, TypeKind want) {
    if (s.empty()) return {"stack underflow"};
    if (s.back() != want) return {fmt::format("operand type {} where {} is needed", int(s.back()), int(want))};
    s.pop_back();
    return {};
  }

  Problem Push(Stack& s, TypeKind t) {
    s.push_back(t);
    if (static_cast<int>(s.size()) > kMaxStack) return {"stack deeper than the limit", true};
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    return {};
  }

  // Records the stack at a successor; shapes must agree where paths join.
  Problem FlowTo(size_t target, const Stack& s) {
    if (target >= p_.code.size()) return {"control runs past the end of the code"};
    if (!states_[target]) {
      states_[target] = s;
    } else if (*states_[target] != s) {
      return {fmt::format("stack shapes differ where paths join at {}", target)};
    }
    return {};
  }

  static bool InRange(int32_t i, size_t n) { return i >= 0 && static_cast<size_t>(i) < n; }

  // Operand `v` is in range for what `what` names.
  Problem CheckOperand(Operand what, int32_t v) const {
    switch (what) {
      case Operand::kSlot: return InRange(v, p_.fields.size()) ? Problem{} : Problem{"field slot out of range"};
      case Operand::kConst: return InRange(v, p_.constants.size()) ? Problem{} : Problem{"constant index out of range"};
      case Operand::kSet: return InRange(v, p_.sets.size()) ? Problem{} : Problem{"set index out of range"};
      case Operand::kRegex: return InRange(v, p_.regexes.size()) ? Problem{} : Problem{"regex index out of range"};
      case Operand::kTable:
        return InRange(v, p_.dispatch_tables.size()) ? Problem{} : Problem{"dispatch table out of range"};
      case Operand::kFunction:
        return InRange(v, p_.functions.size()) ? Problem{} : Problem{"function index out of range"};
      case Operand::kTarget:
        return v > static_cast<int32_t>(pc_) ? Problem{} : Problem{fmt::format("jump target {} is not forward", v)};
      case Operand::kDecision:
        return IsDecision(v) ? Problem{} : Problem{"decision is not keep, drop or watch"};
      case Operand::kRule:
        return v >= -1 && v < static_cast<int32_t>(p_.rules.size()) ? Problem{} : Problem{"rule index out of range"};
      case Operand::kArgCount:  // checked against the function (kCall)
      case Operand::kNone: return {};
    }
    return {};
  }

  // The type an operand of kind kSlot/kConst/kSet names.
  TypeKind TypeOf(Operand what, int32_t v) const {
    switch (what) {
      case Operand::kSlot: return p_.field_types[v].kind;
      case Operand::kConst: return p_.constants[v].type.kind;
      case Operand::kSet: return p_.sets[v].elem.kind;
      default: return TypeKind::kError;
    }
  }

  // A jump table on an enum field: one forward target per entry; ends the path.
  Problem Dispatch(const Instruction& ins, const Stack& s) {
    if (p_.field_types[ins.a].kind != TypeKind::kEnum) return {"dispatch on a field that is not an enum"};
    const auto& table = p_.dispatch_tables[ins.b];
    if (table.empty()) return {"empty dispatch table"};
    for (const int32_t target : table) {
      if (Problem p = CheckOperand(Operand::kTarget, target)) return p;
      if (Problem p = FlowTo(target, s)) return p;
    }
    return {};
  }

  // A fused test-and-branch: the field's type against the test; the stack is unchanged.
  Problem FusedBranch(const Instruction& ins, const OpcodeInfo& info, const Stack& s) {
    if (ins.y > 1) return {"branch sense is neither 0 nor 1"};
    const TypeKind field = p_.field_types[ins.a].kind;
    if (ins.op == Opcode::kBranchCompare) {
      const OpcodeInfo* test = FindOpcode(ins.x);
      if (test == nullptr || test->effect != Effect::kBinary) return {"fused comparison is not a binary opcode"};
      if (test->lhs != field || test->rhs != p_.constants[ins.b].type.kind) {
        return {"fused comparison operand types do not match"};
      }
    } else if (ins.op == Opcode::kBranchInSet) {
      if (p_.sets[ins.b].elem.kind != field) return {"set element type does not match the field"};
    } else if (info.lhs != field) {
      return {ins.op == Opcode::kBranchField ? "branch on a field that is not bool" : "regex on a field that is not a string"};
    }
    if (Problem p = FlowTo(ins.c, s)) return p;
    return FlowTo(pc_ + 1, s);
  }

  // A DECIDE gives the decision of the rule it names (or the default's), so explain never
  // names a rule that decided otherwise, and no pass can merge a watch with a keep.
  Problem DecisionOfItsRule(const Instruction& ins) const {
    const Decision written = ins.b < 0 ? p_.default_decision : p_.rules[ins.b].decision;
    const auto decided = static_cast<Decision>(ins.a);
    if (decided == written) return {};
    return {fmt::format("DECIDE {} but {} decides {}", DecisionName(decided),
                        ins.b < 0 ? std::string("the default") : fmt::format("rule {}", ins.b),
                        DecisionName(written))};
  }

  Problem Step(const Instruction& ins, Stack& s) {
    const OpcodeInfo* found = FindOpcode(ins.op);
    if (found == nullptr) return {fmt::format("unknown opcode {}", static_cast<int>(ins.op))};
    const OpcodeInfo& info = *found;
    for (const auto& [what, v] : {std::pair{info.a, ins.a}, std::pair{info.b, ins.b}, std::pair{info.c, ins.c}}) {
      if (Problem p = CheckOperand(what, v)) return p;
    }
    Problem p;
    switch (info.effect) {
      case Effect::kPush: p = Push(s, TypeOf(info.a, ins.a)); break;
      case Effect::kUnary:
        p = Pop(s, info.a == Operand::kSet ? TypeOf(info.a, ins.a) : info.lhs);
        if (!p) p = Push(s, TypeKind::kBool);
        break;
      case Effect::kBinary:
        p = Pop(s, info.rhs);
        if (!p) p = Pop(s, info.lhs);
        if (!p) p = Push(s, TypeKind::kBool);
        break;
      case Effect::kJump: return FlowTo(ins.a, s);
      case Effect::kCondJump:
        p = Pop(s, info.lhs);
        if (!p) p = FlowTo(ins.a, s);
        break;
      case Effect::kNone: break;
      case Effect::kCall: {
        const FunctionRef& f = p_.functions[ins.a];
        if (ins.b != static_cast<int32_t>(f.args.size())) return {"argument count does not match the function"};
        for (size_t k = f.args.size(); k-- > 0 && !p;) p = Pop(s, f.args[k].kind);
        if (!p) p = Push(s, f.result.kind);
        break;
      }
      case Effect::kBranch: return FusedBranch(ins, info, s);
      case Effect::kDispatch: return Dispatch(ins, s);
      case Effect::kDecide: return DecisionOfItsRule(ins);  // ends the path
    }
    if (p) return p;
    return FlowTo(pc_ + 1, s);
  }

  const ProgramImage& p_;
  std::vector<std::optional<Stack>> states_;
  size_t pc_ = 0;
  int max_depth_ = 0;
};

}  // namespace

Verified Verify(const ProgramImage& program, bool with_shapes) { return Verifier(program).Run(with_shapes); }

}  // namespace guardpolicy
