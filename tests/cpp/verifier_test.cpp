// verifier_test.cpp: malformed programs are refused with the reason.
#include <gtest/gtest.h>

#include "guardpolicy/optimizer.h"
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

namespace guardpolicy {
namespace {

// Two paths end in the same two instructions (test f1, drop by rule 0): merge_tails makes
// the earlier copy jump to the later one, dead_code drops it, and every input decides as
// before with the same rule.
TEST(MergeTails, IdenticalTailsShareOneCopyAndDecideAsBefore) {
  Program p;
  p.fields = {"is_global", "has_value"};
  p.field_types = {Type::Bool(), Type::Bool()};
  p.field_args = {{}, {}};
  p.rules = {RuleInfo{"p", "f", 1, 1, Decision::kDrop}};
  p.rule_entry = {0};
  auto branch = [](int32_t slot, uint8_t sense, int32_t target) {
    Instruction ins{Opcode::kBranchField, slot, 0, target};
    ins.y = sense;
    return ins;
  };
  p.code = {branch(0, 1, 3), branch(1, 0, 5), {Opcode::kDecide, 1, 0},
            branch(1, 0, 5), {Opcode::kDecide, 1, 0}, {Opcode::kDecide, 0, -1}};
  ASSERT_EQ(Verify(p), "");
  Program merged = p;
  ASSERT_TRUE(passes::MergeIdenticalTails(merged));
  EXPECT_EQ(merged.code[1].op, Opcode::kNop);  // right before its copy: falls through
  EXPECT_EQ(merged.code[2].op, Opcode::kNop);
  ASSERT_EQ(Verify(merged), "");
  ASSERT_TRUE(passes::EliminateDeadCode(merged));
  ASSERT_EQ(Verify(merged), "");
  EXPECT_EQ(merged.code.size(), 4u);
  for (int64_t f0 : {0, 1}) {
    for (int64_t f1 : {0, 1}) {
      const Value values[] = {{f0, 0, {}}, {f1, 0, {}}, {}};
      const Outcome a = Evaluate(p, values), b = Evaluate(merged, values);
      EXPECT_EQ(a.decision, b.decision);
      EXPECT_EQ(a.rule, b.rule);
    }
  }
  // Nothing else to merge: a second run changes nothing.
  EXPECT_FALSE(passes::MergeIdenticalTails(merged));

  // Not adjacent: the earlier copy becomes a jump to the later one.
  Program apart = p;
  apart.code = {branch(0, 1, 4), branch(1, 0, 6), {Opcode::kDecide, 1, 0}, {Opcode::kDecide, 0, -1},
                branch(1, 0, 6), {Opcode::kDecide, 1, 0}, {Opcode::kDecide, 0, -1}};
  ASSERT_EQ(Verify(apart), "");
  Program apart_merged = apart;
  ASSERT_TRUE(passes::MergeIdenticalTails(apart_merged));
  EXPECT_EQ(apart_merged.code[1].op, Opcode::kJump);
  EXPECT_EQ(apart_merged.code[1].a, 4);
  ASSERT_EQ(Verify(apart_merged), "");
  // A tail whose start is on another stack shape is left alone.
  Program shapes = p;
  shapes.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfTrue, 5, 0}, {Opcode::kLoadField, 1, 0},
                 {Opcode::kNot, 0, 0},       {Opcode::kDecide, 1, 0},     {Opcode::kPushConst, 0, 0},
                 {Opcode::kLoadField, 1, 0}, {Opcode::kNot, 0, 0},        {Opcode::kDecide, 1, 0}};
  shapes.constants = {Constant{Type::Int(), 7, 0, {}}};  // [3..4] runs on [bool], [7..8] on [int, bool]
  ASSERT_EQ(Verify(shapes), "");
  EXPECT_FALSE(passes::MergeIdenticalTails(shapes));
}

}  // namespace
}  // namespace guardpolicy
