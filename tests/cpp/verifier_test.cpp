// verifier_test.cpp: malformed programs are refused with the reason.
#include <gtest/gtest.h>

#include <re2/re2.h>

#include <set>
#include <string>
#include <type_traits>

#include "guardpolicy/optimizer.h"
#include "guardpolicy/plugin.h"
#include "guardpolicy/verifier.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

ProgramImage Base() {
  ProgramImage p;
  p.fields = {"is_global"};
  p.field_types = {Type::Bool()};
  p.constants = {Constant{Type::Int(), 3, 0, {}}};
  p.rules = {RuleInfo{"p", "f", 1, 1, Decision::kDrop}};
  p.rule_entry = {0};
  return p;
}

TEST(Verifier, AcceptsAWellFormedProgram) {
  ProgramImage p = Base();
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 3, 0}, {Opcode::kDecide, 1, 0},
            {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p).message(), "");
  EXPECT_EQ(Verify(p).max_stack, 1);
}

TEST(Verifier, RefusesBackwardJumps) {
  ProgramImage p = Base();
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 0, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p).message(), "pc 1: jump target 0 is not forward");
}

TEST(Verifier, RefusesFallingOffTheEnd) {
  ProgramImage p = Base();
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 2, 0}};
  EXPECT_EQ(Verify(p).message(), "pc 1: control runs past the end of the code");
}

TEST(Verifier, RefusesTypeErrorsAndUnderflow) {
  ProgramImage p = Base();
  p.code = {{Opcode::kPushConst, 0, 0}, {Opcode::kJumpIfTrue, 2, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_NE(Verify(p).message().find("pc 1: operand type"), std::string::npos);
  p.code = {{Opcode::kNot, 0, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p).message(), "pc 0: stack underflow");
}

TEST(Verifier, RefusesOutOfRangeOperands) {
  ProgramImage p = Base();
  p.code = {{Opcode::kLoadField, 5, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p).message(), "pc 0: field slot out of range");
  p.code = {{Opcode::kDecide, 0, 7}};
  EXPECT_EQ(Verify(p).message(), "pc 0: rule index out of range");
  p.code = {{Opcode::kDecide, 3, -1}};
  EXPECT_EQ(Verify(p).message(), "pc 0: decision is not keep, drop or watch");
  p.code = {{static_cast<Opcode>(200), 0, 0}};
  EXPECT_EQ(Verify(p).message(), "pc 0: unknown opcode 200");
}

TEST(Verifier, AcceptsWatchAndRefusesADecisionItsRuleDoesNotMake) {
  ProgramImage p = Base();
  p.rules[0].decision = Decision::kWatch;
  p.code = {{Opcode::kLoadField, 0, 0},
            {Opcode::kJumpIfFalse, 3, 0},
            {Opcode::kDecide, 2, 0},
            {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p).message(), "");
  p.code[2].a = 0;  // a keep in the watch rule's name: explain would name the wrong decision
  EXPECT_EQ(Verify(p).message(), "pc 2: DECIDE keep but rule 0 decides watch");
  p.code[2].a = 2;
  p.default_decision = Decision::kWatch;
  EXPECT_EQ(Verify(p).message(), "pc 3: DECIDE keep but the default decides watch");
  p.code[3].a = 2;
  EXPECT_EQ(Verify(p).message(), "");
}

TEST(Verifier, RefusesMismatchedStacksAtJoins) {
  ProgramImage p = Base();
  // One path reaches pc 3 with an int on the stack, the other with nothing.
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 3, 0}, {Opcode::kPushConst, 0, 0},
            {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(Verify(p).message(), "pc 2: stack shapes differ where paths join at 3");
}

// A constant of each operand type an operator row of the opcode table can name.
Constant ConstantOf(TypeKind kind) {
  switch (kind) {
    case TypeKind::kBool: return {Type::Bool(), 1, 0, {}};
    case TypeKind::kInt: return {Type::Int(), 3, 0, {}};
    case TypeKind::kString: return {Type::String(), 0, 0, "x"};
    case TypeKind::kEnum: return {Type::Enum(0), 0, 0, "x"};
    case TypeKind::kEnumSet: return {Type::EnumSet(0), 0, 1, {}};
    case TypeKind::kError: break;
  }
  return {};
}

// Every row of the opcode table has a name of its own, and an operator row's operand types
// are what the verifier demands: its lhs and rhs verify, any other rhs type is refused.
TEST(OpcodeTable, OperatorRowsGiveTheVerifiersOperandTypes) {
  std::set<std::string> names;
  int operators = 0;
  for (size_t i = 0; i < std::size(kOpcodeTable); ++i) {
    const Opcode op = static_cast<Opcode>(i);
    EXPECT_TRUE(names.insert(OpcodeName(op)).second) << OpcodeName(op);
    if (!IsBinary(op)) continue;
    ++operators;
    const OpcodeInfo& row = kOpcodeTable[i];
    ProgramImage p = Base();
    p.code = {{Opcode::kPushConst, 0, 0}, {Opcode::kPushConst, 1, 0}, {op, 0, 0}, {Opcode::kDecide, 0, -1}};
    p.constants = {ConstantOf(row.lhs), ConstantOf(row.rhs)};
    EXPECT_EQ(Verify(p).message(), "") << row.name;
    for (const TypeKind other : {TypeKind::kBool, TypeKind::kInt, TypeKind::kString, TypeKind::kEnum}) {
      if (other == row.rhs) continue;
      p.constants[1] = ConstantOf(other);
      EXPECT_EQ(Verify(p).message(), "pc 2: operand type " + std::to_string(int(other)) + " where " +
                                         std::to_string(int(row.rhs)) + " is needed")
          << row.name;
    }
  }
  EXPECT_EQ(operators, 16);  // EQ/NE on bool, int, string, enum; LT..GE; SET_HAS; three string tests
}

// The verifier's error says whether the stack limit (an author can reach it) or a malformed
// program (a defect of what made it) refused the code; it reads the image only.
TEST(Verifier, ErrorsAreTypedAndTheImageIsOnlyRead) {
  static_assert(std::is_same_v<decltype(&Verify), Verified (*)(const ProgramImage&, bool)>);
  ProgramImage deep = Base();
  for (int i = 0; i <= kMaxStack; ++i) deep.code.push_back({Opcode::kPushConst, 0, 0});
  deep.code.push_back({Opcode::kDecide, 0, -1});
  const Verified too_deep = Verify(deep);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_EQ(too_deep.error->kind, VerifyError::Kind::kStackTooDeep);
  EXPECT_EQ(too_deep.message(), "pc " + std::to_string(kMaxStack) + ": stack deeper than the limit");
  ProgramImage backwards = Base();
  backwards.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 0, 0}, {Opcode::kDecide, 0, -1}};
  const Verified malformed = Verify(backwards);
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.error->kind, VerifyError::Kind::kMalformed);
  ProgramImage shallow = Base();
  shallow.code = {{Opcode::kPushConst, 0, 0}, {Opcode::kPushConst, 0, 0}, {Opcode::kDecide, 0, -1}};
  const Verified ok = Verify(shallow, /*with_shapes=*/true);
  EXPECT_EQ(ok.max_stack, 2);
  ASSERT_EQ(ok.shapes.size(), 3u);
  EXPECT_EQ(ok.shapes[2], StackShape({TypeKind::kInt, TypeKind::kInt}));
}

// The kind and message of the LinkError that linking `image` throws ("" when it links).
std::pair<std::optional<LinkError::Kind>, std::string> LinkProblem(const ProgramImage& image) {
  try {
    (void)testing::Linked(image);
  } catch (const LinkError& e) {
    return {e.kind(), e.what()};
  }
  return {std::nullopt, ""};
}

// Only Program::Link makes a Program: from an image that verifies, whose names the schema
// has with the same types, and whose patterns RE2 takes.
TEST(ProgramLink, OnlyAVerifiedBoundImageBecomesAProgram) {
  static_assert(!std::is_default_constructible_v<Program>);
  ProgramImage p = Base();
  p.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfFalse, 3, 0}, {Opcode::kDecide, 1, 0},
            {Opcode::kDecide, 0, -1}};
  p.regexes = {"^L\\['x'\\]$"};
  const Program linked = testing::Linked(p);
  EXPECT_EQ(linked.max_stack(), 1);
  EXPECT_EQ(linked.image().code.size(), 4u);
  EXPECT_TRUE(RE2::FullMatch("L['x']", linked.regex(0)));
  const Value drop[] = {{1, 0, {}}}, keep[] = {{0, 0, {}}};
  EXPECT_EQ(Evaluate(linked, drop).decision, Decision::kDrop);
  EXPECT_EQ(Evaluate(linked, keep).decision, Decision::kKeep);

  ProgramImage unknown = p;
  unknown.fields = {"no_such_field"};
  EXPECT_EQ(LinkProblem(unknown), std::pair(std::optional(LinkError::Kind::kUnbound),
                                            std::string("`no_such_field` is neither a schema field nor a filter "
                                                        "of a loaded plugin")));
  ProgramImage mistyped = p;
  mistyped.field_types = {Type::Int()};
  mistyped.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_EQ(LinkProblem(mistyped), std::pair(std::optional(LinkError::Kind::kUnbound),
                                             std::string("field `is_global` has type int here but bool in the schema")));
  ProgramImage bad_regex = p;
  bad_regex.regexes = {"("};
  EXPECT_EQ(LinkProblem(bad_regex).first, LinkError::Kind::kBadRegex);
  ProgramImage backwards = p;
  backwards.code[1].a = 0;
  EXPECT_EQ(LinkProblem(backwards), std::pair(std::optional(LinkError::Kind::kMalformed),
                                              std::string("pc 1: jump target 0 is not forward")));
}

TEST(Verifier, EveryCompiledStdPolicyVerifies) {
  Loader loader = testing::MakeLoader();
  for (const char* name : {"skip_guard_on_inbuilt_nn_modules", "skip_guard_on_all_nn_modules",
                           "keep_tensor_guards", "skip_guard_on_globals", "keep_portable_guards",
                           "skip_all_guards"}) {
    auto compiled = loader.Load(SourceFileFromPath(testing::kDataDir + "/std/" + name + ".gpol"), "", {});
    EXPECT_EQ(Verify(compiled->program().image()).message(), "") << name;
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
  ProgramImage p;
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
  ASSERT_EQ(Verify(p).message(), "");
  ProgramImage merged = p;
  ASSERT_TRUE(passes::MergeIdenticalTails(merged));
  EXPECT_EQ(merged.code[1].op, Opcode::kNop);  // right before its copy: falls through
  EXPECT_EQ(merged.code[2].op, Opcode::kNop);
  ASSERT_EQ(Verify(merged).message(), "");
  ASSERT_TRUE(passes::EliminateDeadCode(merged));
  ASSERT_EQ(Verify(merged).message(), "");
  EXPECT_EQ(merged.code.size(), 4u);
  for (int64_t f0 : {0, 1}) {
    for (int64_t f1 : {0, 1}) {
      const Value values[] = {{f0, 0, {}}, {f1, 0, {}}, {}};
      const Outcome a = Evaluate(testing::Linked(p), values), b = Evaluate(testing::Linked(merged), values);
      EXPECT_EQ(a.decision, b.decision);
      EXPECT_EQ(a.rule, b.rule);
    }
  }
  // Nothing else to merge: a second run changes nothing.
  EXPECT_FALSE(passes::MergeIdenticalTails(merged));

  // Not adjacent: the earlier copy becomes a jump to the later one.
  ProgramImage apart = p;
  apart.code = {branch(0, 1, 4), branch(1, 0, 6), {Opcode::kDecide, 1, 0}, {Opcode::kDecide, 0, -1},
                branch(1, 0, 6), {Opcode::kDecide, 1, 0}, {Opcode::kDecide, 0, -1}};
  ASSERT_EQ(Verify(apart).message(), "");
  ProgramImage apart_merged = apart;
  ASSERT_TRUE(passes::MergeIdenticalTails(apart_merged));
  EXPECT_EQ(apart_merged.code[1].op, Opcode::kJump);
  EXPECT_EQ(apart_merged.code[1].a, 4);
  ASSERT_EQ(Verify(apart_merged).message(), "");
  // A tail whose start is on another stack shape is left alone.
  ProgramImage shapes = p;
  shapes.code = {{Opcode::kLoadField, 0, 0}, {Opcode::kJumpIfTrue, 5, 0}, {Opcode::kLoadField, 1, 0},
                 {Opcode::kNot, 0, 0},       {Opcode::kDecide, 1, 0},     {Opcode::kPushConst, 0, 0},
                 {Opcode::kLoadField, 1, 0}, {Opcode::kNot, 0, 0},        {Opcode::kDecide, 1, 0}};
  shapes.constants = {Constant{Type::Int(), 7, 0, {}}};  // [3..4] runs on [bool], [7..8] on [int, bool]
  ASSERT_EQ(Verify(shapes).message(), "");
  EXPECT_FALSE(passes::MergeIdenticalTails(shapes));
}

}  // namespace
}  // namespace guardpolicy
