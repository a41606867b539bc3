// verifier_test.cpp: malformed programs are refused with the reason.
#include <gtest/gtest.h>

#include "guardpolicy/verifier.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

Program Base() {
  Program p;
  p.fields = {"is_global"};
  p.field_types = {Type::Bool()};
  p.constants = {Constant{Type::Int(), 3, 0, {}}};
  p.rules = {RuleInfo{"p", "f", 1, 1, Decision::kDrop}};
  p.rule_entry = {0};
  return p;
}

TEST(Verifier, AcceptsAWellFormedProgram) {
  Program p = Base();
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 3, 0}, {Opcode::kDecide, 1, 0},
            {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p), "");
  EXPECT_EQ(p.max_stack, 1);
}

TEST(Verifier, RefusesBackwardJumps) {
  Program p = Base();
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 0, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p), "pc 1: jump target 0 is not forward");
}

TEST(Verifier, RefusesFallingOffTheEnd) {
  Program p = Base();
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 2, 0}};
  EXPECT_EQ(Verify(p), "pc 1: control runs past the end of the code");
}

TEST(Verifier, RefusesTypeErrorsAndUnderflow) {
  Program p = Base();
  p.code = {{Opcode::kPushConst, 0, 0}, {Opcode::kJumpIfTrue, 2, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_NE(Verify(p).find("pc 1: operand type"), std::string::npos);
  p.code = {{Opcode::kNot, 0, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p), "pc 0: stack underflow");
}

TEST(Verifier, RefusesOutOfRangeOperands) {
  Program p = Base();
  p.code = {{Opcode::kLoadField, 5, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p), "pc 0: field slot out of range");
  p.code = {{Opcode::kDecide, 0, 7}};
  EXPECT_EQ(Verify(p), "pc 0: rule index out of range");
  p.code = {{Opcode::kDecide, 2, -1}};
  EXPECT_EQ(Verify(p), "pc 0: decision is neither keep nor drop");
  p.code = {{static_cast<Opcode>(200), 0, 0}};
  EXPECT_EQ(Verify(p), "pc 0: unknown opcode 200");
}

TEST(Verifier, RefusesMismatchedStacksAtJoins) {
  Program p = Base();
  // One path reaches pc 3 with an int on the stack, the other with nothing.
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 3, 0}, {Opcode::kPushConst, 0, 0},
            {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p), "pc 2: stack shapes differ where paths join at 3");
}

TEST(Verifier, EveryCompiledStdPolicyVerifies) {
  Loader loader = testing::MakeLoader();
  for (const char* name : {"skip_guard_on_inbuilt_nn_modules", "skip_guard_on_all_nn_modules",
                           "keep_tensor_guards", "skip_guard_on_globals", "keep_portable_guards",
                           "skip_all_guards"}) {
    auto compiled = loader.Load(SourceFileFromPath(testing::kDataDir + "/std/" + name + ".gpol"), "", {});
    Program copy = compiled->program();
    EXPECT_EQ(Verify(copy), "") << name;
  }
}

}  // namespace
}  // namespace guardpolicy
