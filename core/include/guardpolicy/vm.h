// vm.h: evaluates a Program (linked, so verified) on one guard entry.
//
// The entry view gives the value of a field slot (Program::fields order) on demand, so a
// caller can extract fields lazily: only the fields the taken path reads, each once. The
// VM allocates nothing; it throws only what the view throws. It must only run programs
// that passed Verify().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "guardpolicy/bytecode.h"
#include "guardpolicy/string_tests.h"
#include "guardpolicy/verifier.h"

namespace guardpolicy {

struct Outcome {
  Decision decision = Decision::kKeep;
  int32_t rule = -1;  // index into Program::rules, or -1 for the policy default
};

namespace vm_internal {
bool InSet(const ConstSet& set, const Value& v);
bool SetHas(const Value& set, const Value& member);
bool Matches(const Program& p, int32_t regex, std::string_view s);
// Calls plugin function `fn` of `p` on args[0..n). Throws PluginError.
Value CallFunction(const Program& p, int32_t fn, const Value* args, int32_t n);
inline bool EnumEqual(const Value& a, const Value& b) {
  return (a.i >= 0 && b.i >= 0) ? a.i == b.i : a.s == b.s;
}
// The result of binary opcode `op` (an Effect::kBinary row of opcodes.h) on a and b.
[[gnu::always_inline]] inline bool Binary(Opcode op, const Value& a, const Value& b) {
  switch (op) {
#define GP_BINARY_RESULT(op, name, effect, x, y, z, lhs, rhs, expr) GP_IF_BINARY(effect, case Opcode::op: return expr;)
    GP_OPCODES(GP_BINARY_RESULT)
#undef GP_BINARY_RESULT
    default: return false;  // the verifier admits no other
  }
}

}  // namespace vm_internal

// `view.Get(slot)` returns the field's Value (a const reference or a copy).
template <typename View>
Outcome EvaluateView(const Program& p, View& view) {
  using namespace vm_internal;
  // Uninitialized on purpose: zeroing kMaxStack values on every call would cost more than
  // most programs (Value is an implicit-lifetime aggregate, written before it is read).
  alignas(Value) std::byte storage[sizeof(Value) * kMaxStack];
  Value* stack = reinterpret_cast<Value*>(storage);
  int sp = 0;  // next free slot
  const ProgramImage& image = p.image();
  const Instruction* code = image.code.data();
  size_t pc = 0;
  for (;;) {
    const Instruction& ins = code[pc++];
    switch (ins.op) {
      case Opcode::kLoadField: stack[sp++] = view.Get(ins.a); break;
      case Opcode::kPushConst: {
        const Constant& c = image.constants[ins.a];
        stack[sp++] = Value{c.i, c.bits, c.s};
        break;
      }
      case Opcode::kNot: stack[sp - 1].i = !stack[sp - 1].i; break;
      // The operators, each its own case (the table's expression inlined).
#define GP_BINARY_CASE(op, name, effect, x, y, z, lhs, rhs, expr) \
  GP_IF_BINARY(effect, case Opcode::op: {                         \
    const Value& a = stack[sp - 2];                                \
    const Value& b = stack[sp - 1];                                \
    const int64_t r = (expr) ? 1 : 0;                              \
    --sp;                                                          \
    stack[sp - 1] = Value{r, 0, {}};                               \
    break;                                                         \
  })
      GP_OPCODES(GP_BINARY_CASE)
#undef GP_BINARY_CASE
      case Opcode::kInSet:
        stack[sp - 1] = Value{InSet(image.sets[ins.a], stack[sp - 1]) ? 1 : 0, 0, {}};
        break;
      case Opcode::kMatches:
        stack[sp - 1] = Value{Matches(p, ins.a, stack[sp - 1].s) ? 1 : 0, 0, {}};
        break;
      case Opcode::kJump: pc = static_cast<size_t>(ins.a); break;
      case Opcode::kJumpIfFalse:
        if (!stack[--sp].i) pc = static_cast<size_t>(ins.a);
        break;
      case Opcode::kJumpIfTrue:
        if (stack[--sp].i) pc = static_cast<size_t>(ins.a);
        break;
      case Opcode::kDecide: return Outcome{static_cast<Decision>(ins.a), ins.b};
      case Opcode::kNop: break;
      case Opcode::kBranchField:
        if ((view.Get(ins.a).i != 0) == (ins.y != 0)) pc = static_cast<size_t>(ins.c);
        break;
      case Opcode::kBranchCompare: {
        const Constant& k = image.constants[ins.b];
        const Value& v = view.Get(ins.a);
        // The string tests by name: a conditional branch each predicts better than the
        // shared jump table of Binary's switch.
        bool r;
        if (ins.x == Opcode::kStartsWith) r = StartsWith(v.s, k.s);
        else if (ins.x == Opcode::kEndsWith) r = EndsWith(v.s, k.s);
        else if (ins.x == Opcode::kContains) r = Contains(v.s, k.s);
        else r = Binary(ins.x, v, Value{k.i, k.bits, k.s});
        if (r == (ins.y != 0)) pc = static_cast<size_t>(ins.c);
        break;
      }
      case Opcode::kBranchInSet:
        if (InSet(image.sets[ins.b], view.Get(ins.a)) == (ins.y != 0)) pc = static_cast<size_t>(ins.c);
        break;
      case Opcode::kDispatch: {
        const Value& type = view.Get(ins.a);
        const std::vector<int32_t>& table = image.dispatch_tables[ins.b];
        const size_t other = table.size() - 1;
        pc = static_cast<size_t>(table[type.i >= 0 && static_cast<size_t>(type.i) < other ? type.i : other]);
        break;
      }
      case Opcode::kBranchMatches:
        if (Matches(p, ins.b, view.Get(ins.a).s) == (ins.y != 0)) pc = static_cast<size_t>(ins.c);
        break;
      case Opcode::kCall: {
        sp -= ins.b;
        stack[sp] = CallFunction(p, ins.a, stack + sp, ins.b);
        ++sp;
        break;
      }
      default: return Outcome{Decision::kKeep, -1};  // unreachable for verified programs
    }
  }
}

// An entry view over an array of ProgramImage::fields.size() values.
struct ArrayView {
  const Value* values;
  const Value& Get(int32_t slot) const { return values[slot]; }
};

// Throws only PluginError (from a plugin function).
inline Outcome Evaluate(const Program& program, const Value* fields) {
  ArrayView view{fields};
  return EvaluateView(program, view);
}

}  // namespace guardpolicy
