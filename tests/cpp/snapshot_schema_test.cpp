// snapshot_schema_test.cpp: guard snapshots are checked against the schema (closed enums,
// field types), the error naming the frame and the entry's index.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cli.h"
#include "guardpolicy/snapshot.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

// A snapshot of one frame whose second entry has `field: value` (JSON text).
std::string OneFrame(const std::string& field, const std::string& value) {
  return R"({"torch": "2.13.0", "schema_version": 1, "frames": [{"frame": 0, "code": "forward",
    "compile_id": "0/0", "entries": [{"guard_type": "TENSOR_MATCH", "guard_source": "LOCAL", "name": "x"},
    {"guard_type": "ID_MATCH", "guard_source": "GLOBAL", ")" + field + R"(": )" + value + "}]}]}";
}

std::string ParseError(const std::string& json) {
  try {
    ParseSnapshot(json, *testing::TestSchema(), "s.json");
  } catch (const PolicyError& e) {
    return e.diagnostics().items().at(0).message;
  }
  return "";
}

TEST(SnapshotSchema, AGuardSourceOutsideTheEnumIsRefusedWithTheEntryIndex) {
  EXPECT_EQ(ParseError(OneFrame("guard_source", "\"NOPE\"")),
            "cannot read guard snapshot `s.json`: frame 0 entry 1: field `guard_source` is `NOPE`, "
            "not a GuardSource member");
  EXPECT_EQ(ParseError(OneFrame("guard_source", "\"LOCALL\"")),
            "cannot read guard snapshot `s.json`: frame 0 entry 1: field `guard_source` is `LOCALL`, "
            "not a GuardSource member (did you mean `LOCAL`?)");
  // GuardType is open: third-party names are data, as torch would offer them.
  const Snapshot snap = ParseSnapshot(OneFrame("derived_guard_types", R"(["_spyre_TENSOR_MATCH", "ID_MATCH"])"),
                                      *testing::TestSchema(), "s.json");
  ASSERT_EQ(snap.frames.size(), 1u);
  ASSERT_EQ(snap.frames[0].entries.size(), 2u);
  const FieldValues& e = snap.frames[0].entries[1];
  EXPECT_EQ(e.at("guard_source").s, "GLOBAL");
  const auto& source = testing::TestSchema()->enums()[testing::TestSchema()->FindEnum("GuardSource")];
  EXPECT_EQ(e.at("guard_source").i, source.Find("GLOBAL"));
  EXPECT_EQ(e.at("derived_guard_types").s, "\x1f_spyre_TENSOR_MATCH\x1f");
}

TEST(SnapshotSchema, FieldTypesAreChecked) {
  EXPECT_EQ(ParseError(OneFrame("is_global", "\"yes\"")),
            "cannot read guard snapshot `s.json`: frame 0 entry 1: field `is_global` must be a bool, not string");
  EXPECT_EQ(ParseError(OneFrame("source.depth", "1.5")),
            "cannot read guard snapshot `s.json`: frame 0 entry 1: field `source.depth` must be an integer, not number");
  EXPECT_EQ(ParseError(OneFrame("derived_guard_types", "\"ID_MATCH\"")),
            "cannot read guard snapshot `s.json`: frame 0 entry 1: field `derived_guard_types` must be a list of "
            "member names, not string");
}

TEST(SnapshotSchema, CheckCommandRefusesTheSnapshot) {
  const std::string path = ::testing::TempDir() + "snapshot_nope.json";
  std::ofstream(path) << OneFrame("guard_source", "\"NOPE\"");
  std::ostringstream out, err;
  const int rc = cli::Run({"check", testing::kDataDir + "/std/skip_guard_on_globals.gpol", "--guards", path},
                          out, err, testing::kDataDir);
  EXPECT_EQ(rc, cli::kExitUsage);
  EXPECT_NE(err.str().find("frame 0 entry 1: field `guard_source` is `NOPE`, not a GuardSource member"),
            std::string::npos)
      << err.str();
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace guardpolicy
