// listing_format_test.cpp: how disasm and `check --explain` name enum members and rules.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cli.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::Src;

TEST(ListingFormat, DisasmNamesEnumSetMembers) {
  Loader loader = testing::MakeLoader();
  auto p = loader.Load(Src("guardpolicy 1\nunsafe policy p {\n"
                           "  keep when guard_type in {SHAPE_ENV, GLOBAL_STATE, _vendor_MATCH}\n"
                           "  drop when guard_source in {GLOBAL, LOCAL_UNSPECIALIZED_NN_MODULE}\n}\n"),
                       "p", {});
  const std::string listing = Disassemble(p->program().image(), loader.schema());
  // Ordinal order (GLOBAL_STATE is member 24, SHAPE_ENV 39), then names outside the schema.
  EXPECT_NE(listing.find("guard_type in {GLOBAL_STATE, SHAPE_ENV, \"_vendor_MATCH\"} false"), std::string::npos)
      << listing;
  EXPECT_NE(listing.find("guard_source in {GLOBAL, LOCAL_UNSPECIALIZED_NN_MODULE} false"), std::string::npos)
      << listing;
  EXPECT_EQ(listing.find("bits"), std::string::npos) << listing;
  EXPECT_NE(listing.find("keep rule 0 (p at test.gpol:3)"), std::string::npos) << listing;

  // An enum-set constant, as a pass may leave one.
  ProgramImage prog;
  prog.policy_name = "q";
  const int guard_type = loader.schema().FindEnum("GuardType");
  const auto& members = loader.schema().enums()[guard_type].members;
  const uint64_t bits = (uint64_t{1} << (std::find(members.begin(), members.end(), "ID_MATCH") - members.begin())) |
                        (uint64_t{1} << (std::find(members.begin(), members.end(), "TYPE_MATCH") - members.begin()));
  prog.constants.push_back({Type::EnumSet(guard_type), 0, bits, {}});
  prog.code = {{Opcode::kPushConst, 0, 0}, {Opcode::kDecide, 0, -1}};
  EXPECT_NE(Disassemble(prog, loader.schema()).find("PUSH_CONST      0 ({ID_MATCH, TYPE_MATCH})"), std::string::npos)
      << Disassemble(prog, loader.schema());
}

TEST(ListingFormat, CheckExplainNamesTheRuleLikePythonAndDisasm) {
  const std::string policy = ::testing::TempDir() + "listing_explain.gpol";
  std::ofstream(policy) << "guardpolicy 1\nunsafe policy p {\n  use skip_guard_on_globals\n"
                           "  keep when guard_type == TENSOR_MATCH\n  default drop\n}\n";
  const std::string guards = ::testing::TempDir() + "listing_explain.json";
  std::ofstream(guards) << R"({"torch": "2.13.0", "schema_version": 1, "frames": [{"frame": 0, "code": "forward",
    "compile_id": "0/0", "entries": [
      {"guard_type": "TENSOR_MATCH", "guard_source": "LOCAL", "name": "x"},
      {"guard_type": "CONSTANT_MATCH", "guard_source": "GLOBAL", "name": "G['GLOBAL_INT']", "is_global": true},
      {"guard_type": "SHAPE_ENV", "guard_source": "SHAPE_ENV", "name": ""}]}]})";
  std::ostringstream out, err;
  ASSERT_EQ(cli::Run({"check", policy, "--guards", guards, "--explain"}, out, err, testing::kDataDir),
            cli::kExitClean)
      << err.str();
  std::istringstream lines(out.str());
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  ASSERT_EQ(got.size(), 5u) << out.str();
  EXPECT_EQ(got[0], "frame 0 forward [0/0]");
  EXPECT_TRUE(got[1].starts_with("  keep  TENSOR_MATCH")) << got[1];  // decisions padded to `watch`
  EXPECT_TRUE(got[1].ends_with(" p at " + policy + ":4")) << got[1];
  EXPECT_TRUE(got[2].ends_with(" skip_guard_on_globals at " + testing::kDataDir +
                               "/std/skip_guard_on_globals.gpol:6"))
      << got[2];
  EXPECT_TRUE(got[3].ends_with(" default at " + policy + ":5")) << got[3];
}

}  // namespace
}  // namespace guardpolicy
