// corpus_test.cpp: the accept/reject tables in tests/corpus as golden files.
//   reject/GPxxxx_*.gpol -> exact lint output in *.expected (and the named code appears);
//   reject/GP0006_*.gpolc -> the refusal of a bad artifact, the same way;
//   accept/*.gpol        -> lints clean; each policy's disassembly in *.disasm.
// GUARDPOLICY_UPDATE_GOLDENS=1 rewrites the goldens from the current output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "guardpolicy/artifact.h"
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
  const std::pair<std::string, std::string> replacements[] = {{testing::kDataDir, "<data>"},
                                                              {kCorpus.string() + "/", ""}};
  for (const auto& [from, to] : replacements) {
    for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
  }
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

// The cases of `dir`: policy sources, and in reject/ also `.gpolc` artifacts.
std::vector<fs::path> Sources(const char* dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kCorpus / dir)) {
    const fs::path ext = e.path().extension();
    if (ext == ".gpol" || (ext == ".gpolc" && std::string(dir) == "reject")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

SourceFilePtr CorpusFile(const fs::path& p, const char* dir) {
  return testing::Src(ReadAll(p), std::string(dir) + "/" + p.filename().string());
}

// Optional NAME.options beside a reject file: `key = value` lines.
//   max_source_bytes, max_rules   CompileOptions limits for this case
//   policy                        also Load() this policy (load-time diagnostics, GP4xxx)
//   param.NAME                    a parameter value for that Load (true, false, 12, "text")
struct CaseOptions {
  CompileOptions compile;
  bool load = false;
  std::string policy;
  ParamValues params;
};

Literal ParseLiteral(const std::string& v) {
  Literal lit;
  if (v == "true" || v == "false") {
    lit.kind = Literal::Kind::kBool;
    lit.b = v == "true";
  } else if (!v.empty() && v[0] == '"') {
    lit.kind = Literal::Kind::kString;
    lit.str = v.substr(1, v.size() - 2);
  } else {
    lit.kind = Literal::Kind::kInt;
    lit.i = std::stoll(v);
  }
  return lit;
}

CaseOptions ReadOptions(const fs::path& source) {
  CaseOptions o;
  std::istringstream in(ReadAll(fs::path(source).replace_extension(".options")));
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](std::string t) {
      t.erase(0, t.find_first_not_of(' '));
      t.erase(t.find_last_not_of(' ') + 1);
      return t;
    };
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key == "max_source_bytes") o.compile.max_source_bytes = std::stoul(value);
    if (key == "max_rules") o.compile.max_rules = std::stoi(value);
    if (key == "policy") o.load = true, o.policy = value;
    if (key.rfind("param.", 0) == 0) o.load = true, o.params[key.substr(6)] = ParseLiteral(value);
  }
  return o;
}

Diagnostics RejectDiagnostics(const fs::path& p) {
  const CaseOptions o = ReadOptions(p);
  Loader loader(testing::TestSchema(), testing::kDataDir + "/std", o.compile);
  try {
    SourceFilePtr file = SourceFileFromPath(p.string(), o.compile);
    if (LooksLikeArtifact(file->text(), p.string())) {
      loader.LoadFile(p.string(), o.policy, o.params);
      return {};
    }
    Diagnostics diags = loader.Lint(file).diagnostics;
    if (o.load && !diags.HasErrors()) loader.Load(file, o.policy, o.params);
    return diags;
  } catch (const PolicyError& e) {
    return e.diagnostics();
  }
}

TEST(Corpus, RejectFilesGiveTheirCodeAndExactOutput) {
  const auto files = Sources("reject");
  ASSERT_GE(files.size(), 40u);
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.filename().string());
    const Diagnostics diags = RejectDiagnostics(p);
    const std::string code = p.filename().string().substr(0, 6);
    EXPECT_TRUE(testing::HasCode(diags, code)) << RenderText(diags);
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
      listing += Disassemble(loader.Load(CorpusFile(p, "accept"), decl.name, {})->program().image(), loader.schema());
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

// Every code in diag_codes.h has a reject file (with a .options file where a limit or a
// load-time argument is needed).
TEST(Corpus, EveryDiagnosticCodeHasARejectCase) {
  // Codes no policy text can produce, with why.
  const std::map<std::string, std::string> elsewhere = {
      {"GP9001", "a defect of guardpolicy (bytecode the verifier or linker refuses), not of a policy"},
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
