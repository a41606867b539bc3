// corpus_test.cpp: the accept/reject tables in tests/corpus as golden files.
//   reject/GPxxxx_*.gpol -> exact lint output in *.expected (and the named code appears);
//   accept/*.gpol        -> lints clean; each policy's disassembly in *.disasm.
// GUARDPOLICY_UPDATE_GOLDENS=1 rewrites the goldens from the current output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "guardpolicy/test_runner.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

namespace fs = std::filesystem;
const fs::path kCorpus = fs::path(GUARDPOLICY_SOURCE_DATA_DIR).parent_path() / "tests" / "corpus";

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Paths in output are made relative, so goldens do not depend on the checkout location.
std::string Portable(std::string text) {
  const std::string data = testing::kDataDir;
  for (size_t at; (at = text.find(data)) != std::string::npos;) text.replace(at, data.size(), "<data>");
  return text;
}

void CompareGolden(const fs::path& golden, const std::string& actual) {
  if (std::getenv("GUARDPOLICY_UPDATE_GOLDENS")) {
    std::ofstream(golden, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing; run with GUARDPOLICY_UPDATE_GOLDENS=1";
  EXPECT_EQ(ReadAll(golden), actual) << golden;
}

std::vector<fs::path> Sources(const char* dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kCorpus / dir)) {
    if (e.path().extension() == ".gpol") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

SourceFilePtr CorpusFile(const fs::path& p, const char* dir) {
  return testing::Src(ReadAll(p), std::string(dir) + "/" + p.filename().string());
}

TEST(Corpus, RejectFilesGiveTheirCodeAndExactOutput) {
  const auto files = Sources("reject");
  ASSERT_GE(files.size(), 20u);
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.filename().string());
    Loader loader = testing::MakeLoader();
    const Diagnostics diags = loader.Lint(CorpusFile(p, "reject")).diagnostics;
    const std::string code = p.filename().string().substr(0, 6);
    bool found = false;
    for (const auto& d : diags.items()) found |= d.code == code;
    EXPECT_TRUE(found) << RenderText(diags);
    CompareGolden(fs::path(p).replace_extension(".expected"), Portable(RenderText(diags)));
  }
}

TEST(Corpus, AcceptFilesLintCleanAndDisassembleAsRecorded) {
  const auto files = Sources("accept");
  ASSERT_GE(files.size(), 2u);
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.filename().string());
    Loader loader = testing::MakeLoader();
    auto lint = loader.Lint(CorpusFile(p, "accept"));
    EXPECT_TRUE(lint.diagnostics.empty()) << RenderText(lint.diagnostics);
    std::string listing;
    for (const PolicyDecl& decl : lint.module->policies) {
      listing += Disassemble(loader.Load(CorpusFile(p, "accept"), decl.name, {})->program());
    }
    CompareGolden(fs::path(p).replace_extension(".disasm"), Portable(listing));
  }
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

TEST(Corpus, EveryStdAndAcceptPolicyCarriesPassingTests) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(testing::kDataDir) / "std")) files.push_back(e.path());
  for (const fs::path& p : Sources("accept")) files.push_back(p);
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.string());
    Loader loader = testing::MakeLoader();
    const auto results = RunTests(loader, SourceFileFromPath(p.string()));
    EXPECT_GE(results.size(), 2u);
    for (const ExpectationResult& r : results) EXPECT_TRUE(r.passed()) << r.range.ToString();
  }
}

}  // namespace
}  // namespace guardpolicy

namespace guardpolicy {
namespace {

// Every code in diag_codes.h has a reject file, except those that no single file can show;
// each of those has its own unit test (named beside it).
TEST(Corpus, EveryDiagnosticCodeHasARejectCase) {
  const std::map<std::string, std::string> elsewhere = {
      {"GP0001", "Cli.UsageAndIoErrorsExitTwo"},
      {"GP0002", "Parser.RefusesNulInvalidUtf8AndHugeInput"},
      {"GP0005", "Checker.RuleCountLimit"},
      {"GP4001", "CompilerVm.PolicySelectionAndParameterValues"},
      {"GP4002", "CompilerVm.PolicySelectionAndParameterValues"},
  };
  const std::string header = ReadAll(fs::path(GUARDPOLICY_SOURCE_DATA_DIR).parent_path() /
                                     "core/include/guardpolicy/diag_codes.h");
  int codes = 0;
  for (size_t at = header.find("\"GP"); at != std::string::npos; at = header.find("\"GP", at + 1)) {
    const std::string code = header.substr(at + 1, 6);
    ++codes;
    if (elsewhere.count(code)) continue;
    bool found = false;
    for (const fs::path& p : Sources("reject")) found |= p.filename().string().rfind(code, 0) == 0;
    EXPECT_TRUE(found) << code << " has no tests/corpus/reject/" << code << "_*.gpol";
  }
  EXPECT_GE(codes, 36);
}

}  // namespace
}  // namespace guardpolicy
