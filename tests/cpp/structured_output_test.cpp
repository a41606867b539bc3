// structured_output_test.cpp: JSON and SARIF carry the same diagnostics as the text output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "test_util.h"

namespace guardpolicy {
namespace {

namespace fs = std::filesystem;

TEST(StructuredOutput, JsonAndSarifMatchTextForEveryRejectFile) {
  const fs::path reject = fs::path(GUARDPOLICY_SOURCE_DATA_DIR).parent_path() / "tests/corpus/reject";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(reject)) {
    if (e.path().extension() != ".gpol" || !e.is_regular_file()) continue;
    Loader loader = testing::MakeLoader();
    const Diagnostics ds = loader.Lint(SourceFileFromPath(e.path().string())).diagnostics;
    const auto json = nlohmann::json::parse(RenderJson(ds));
    const auto sarif = nlohmann::json::parse(RenderSarif(ds, "test"));
    ASSERT_EQ(json.size(), ds.size()) << e.path();
    const auto& results = sarif["runs"][0]["results"];
    ASSERT_EQ(results.size(), ds.size());
    EXPECT_EQ(sarif["version"], "2.1.0");
    for (size_t i = 0; i < ds.size(); ++i) {
      const Diagnostic& d = ds.items()[i];
      const LineCol lc = d.range.start();
      EXPECT_EQ(json[i]["code"], d.code);
      EXPECT_EQ(json[i]["message"], d.message);
      EXPECT_EQ(json[i]["severity"], SeverityName(d.severity));
      EXPECT_EQ(json[i]["related"].size(), d.related.size());
      EXPECT_EQ(results[i]["ruleId"], d.code);
      if (d.range.valid()) {
        EXPECT_EQ(json[i]["line"], lc.line);
        EXPECT_EQ(json[i]["column"], lc.col);
        const auto& region = results[i]["locations"][0]["physicalLocation"]["region"];
        EXPECT_EQ(region["startLine"], lc.line);
        EXPECT_EQ(region["startColumn"], lc.col);
        // The text form starts with the same position and code.
        EXPECT_EQ(RenderText(d).rfind(d.range.ToString() + ": " + SeverityName(d.severity) + "[" + d.code + "]", 0), 0u);
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

}  // namespace
}  // namespace guardpolicy
