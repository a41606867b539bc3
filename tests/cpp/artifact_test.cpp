// artifact_test.cpp: .gpolc round trips, and refuses every corruption without crashing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "guardpolicy/artifact.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/fnv1a.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = fs::path(GUARDPOLICY_SOURCE_DATA_DIR).parent_path();

std::vector<fs::path> AllPolicyFiles() {
  std::vector<fs::path> out;
  for (const char* dir : {"policies/std", "policies/examples", "tests/corpus/accept"}) {
    for (const auto& e : fs::directory_iterator(kRoot / dir)) {
      if (e.path().extension() == ".gpol") out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const CompiledPolicy> RoundTrip(const CompiledPolicy& p,
                                                const Schema& schema = *testing::TestSchema()) {
  return DeserializePolicy(SerializePolicy(p, schema), schema, "mem.gpolc");
}

TEST(Artifact, RoundTripKeepsDisassemblyAndMetadataForEveryPolicy) {
  int policies = 0;
  for (const fs::path& path : AllPolicyFiles()) {
    // policies/examples/ has policies that read plugin fields.
    Loader loader(testing::PluginSchema(), testing::kDataDir + "/std");
    auto file = SourceFileFromPath(path.string());
    const LintResult lint = loader.Lint(file);  // outlives the loop over its policies
    for (const PolicyDecl& decl : lint.module->policies) {
      auto compiled = loader.Load(file, decl.name, {});
      auto loaded = RoundTrip(*compiled, *testing::PluginSchema());
      EXPECT_EQ(Disassemble(loaded->program().image(), loader.schema()), Disassemble(compiled->program().image(), loader.schema()))
          << path;
      EXPECT_EQ(loaded->name(), compiled->name());
      EXPECT_EQ(loaded->is_unsafe(), compiled->is_unsafe());
      EXPECT_EQ(loaded->doc(), compiled->doc());
      EXPECT_EQ(loaded->runtime().config.size(), compiled->runtime().config.size());
      EXPECT_EQ(loaded->runtime().stance.has_value(), compiled->runtime().stance.has_value());
      EXPECT_EQ(loaded->runtime().verify.has_value(), compiled->runtime().verify.has_value());
      EXPECT_EQ(loaded->runtime().on_violation.has_value(),
                compiled->runtime().on_violation.has_value());
      EXPECT_EQ(loaded->runtime().dispatch.has_value(), compiled->runtime().dispatch.has_value());
      EXPECT_EQ(loaded->meta().params.size(), compiled->meta().params.size());
      ++policies;
    }
  }
  EXPECT_GE(policies, 9);
}

TEST(Artifact, RoundTripKeepsTheRuntimeLines) {
  Loader loader = testing::MakeLoader();
  auto compiled = loader.Load(SourceFileFromPath((kRoot / "tests/corpus/accept/runtime_lines.gpol").string()), "", {});
  auto loaded = RoundTrip(*compiled);
  ASSERT_TRUE(loaded->runtime().verify.has_value());
  EXPECT_EQ(loaded->runtime().verify->every_calls, 100);
  ASSERT_TRUE(loaded->runtime().on_violation.has_value());
  EXPECT_EQ(loaded->runtime().on_violation->action, "raise");
  ASSERT_TRUE(loaded->runtime().dispatch.has_value());
  EXPECT_EQ(loaded->runtime().dispatch->mode, "direct");
}

std::string ServingBytes() {
  Loader loader = testing::MakeLoader();
  auto p = loader.Load(SourceFileFromPath((kRoot / "tests/corpus/accept/serving.gpol").string()), "", {});
  return SerializePolicy(*p, *testing::TestSchema());
}

// Either refused with GP0006, or accepted and verified (then it must run).
void LoadOrRefuse(const std::string& bytes, int& refused, int& accepted) {
  try {
    auto p = DeserializePolicy(bytes, *testing::TestSchema(), "x.gpolc");
    std::vector<Value> view(p->program().image().fields.size() + 1);
    Evaluate(p->program(), view.data());
    ++accepted;
  } catch (const PolicyError& e) {
    ASSERT_EQ(e.diagnostics().items().at(0).code, codes::kBadArtifact);
    ++refused;
  }
}

TEST(Artifact, EverySingleByteCorruptionIsRefused) {
  const std::string good = ServingBytes();
  int refused = 0, accepted = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (const unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      LoadOrRefuse(bad, refused, accepted);
    }
  }
  // The checksum covers the payload and every header field is checked.
  EXPECT_EQ(accepted, 0);
  EXPECT_EQ(refused, static_cast<int>(good.size() * 3));
}

TEST(Artifact, EveryTruncationIsRefused) {
  const std::string good = ServingBytes();
  int refused = 0, accepted = 0;
  for (size_t n = 0; n < good.size(); ++n) LoadOrRefuse(good.substr(0, n), refused, accepted);
  EXPECT_EQ(accepted, 0);
}

// Corruptions that keep a valid checksum reach the decoder and the verifier: each is
// refused or verified, never a crash (the ASan build runs this too).
TEST(Artifact, ChecksummedCorruptionsAreDecodedSafely) {
  const std::string good = ServingBytes();
  constexpr size_t kHeader = 36;
  int refused = 0, accepted = 0;
  for (size_t i = kHeader; i < good.size(); ++i) {
    for (const unsigned char mask : {0x01, 0x7f, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      // Recompute the checksum (FNV-1a 64 over the payload) at header bytes 28..35.
      const uint64_t h = guardpolicy::Fnv1a64(std::string_view(bad).substr(kHeader));
      for (int k = 0; k < 8; ++k) bad[28 + k] = static_cast<char>((h >> (8 * k)) & 0xff);
      LoadOrRefuse(bad, refused, accepted);
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(refused + accepted, static_cast<int>((good.size() - kHeader) * 3));
}

TEST(Artifact, WrongVersionWrongSchemaAndNotAnArtifact) {
  std::string bytes = ServingBytes();
  std::string v1 = bytes;
  v1[8] = 1;  // the format before plugin functions and filter slots
  try {
    DeserializePolicy(v1, *testing::TestSchema(), "v1.gpolc");
    FAIL();
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find("format version 1 is older than this guardpolicy's 5: recompile it from its source"),
              std::string::npos);
  }
  const Schema other = Schema::FromYaml("fields:\n  name:\n    type: string\n    doc: d\n    from: f\n", "o");
  try {
    DeserializePolicy(bytes, other, "s.gpolc");
    FAIL();
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find("compiled against another schema"), std::string::npos);
  }
  EXPECT_FALSE(LooksLikeArtifact("guardpolicy 1\n"));
  EXPECT_THROW(DeserializePolicy("guardpolicy 1\n", *testing::TestSchema(), "t"), PolicyError);
}

TEST(Artifact, LoadFileAcceptsArtifactsAndRefusesParameters) {
  const std::string path = ::testing::TempDir() + "serving.gpolc";
  std::ofstream(path, std::ios::binary) << ServingBytes();
  Loader loader = testing::MakeLoader();
  EXPECT_EQ(loader.LoadFile(path, "", {})->name(), "serving");
  Literal lit;
  EXPECT_THROW(loader.LoadFile(path, "", {{"config_prefix", lit}}), PolicyError);
  EXPECT_THROW(loader.LoadFile(path, "other", {}), PolicyError);
}

// Issue 17 item 7: the checksum and the schema hash are the published FNV-1a-64.
TEST(Artifact, ChecksumIsThePublishedFnv1a64) {
  // Test vectors of draft-eastlake-fnv (FNV-1a, 64 bits).
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  // The header's checksum, recomputed here with the published constants, not the code's.
  const std::string bytes = ServingBytes();
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t k = 36; k < bytes.size(); ++k) {
    h ^= static_cast<unsigned char>(bytes[k]);
    h *= 0x100000001b3ULL;
  }
  uint64_t header = 0;
  for (int k = 0; k < 8; ++k) header |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[28 + k])) << (8 * k);
  EXPECT_EQ(header, h);
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), kArtifactFormatVersion) << "format version";
}

// An artifact of format version 2 (the one with the mistyped FNV basis) says to recompile.
TEST(Artifact, OlderFormatSaysToRecompile) {
  std::string v2 = ServingBytes();
  v2[8] = 2;
  try {
    DeserializePolicy(v2, *testing::TestSchema(), "old.gpolc");
    FAIL() << "a version 2 artifact was loaded";
  } catch (const PolicyError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    const Diagnostic& d = e.diagnostics().items()[0];
    EXPECT_EQ(d.code, codes::kBadArtifact);
    EXPECT_EQ(d.message, "cannot load compiled policy `old.gpolc`: format version 2 is older than this guardpolicy's 5: "
                         "recompile it from its source");
    EXPECT_EQ(d.help, "recompile it with `guardpolicy compile`");
  }
}

// Issue 17 item 6: a .gpolc cut inside its magic (or empty) is a refused artifact (GP0006),
// not policy source with a NUL byte (GP0004).
TEST(Artifact, TruncatedInsideTheMagicIsARefusedArtifact) {
  const std::string good = ServingBytes();
  Loader loader = testing::MakeLoader();
  for (size_t n = 0; n < 36; ++n) {
    SCOPED_TRACE(n);
    const std::string path = testing::TestTempPath("cut.gpolc");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good.substr(0, n);
    try {
      loader.LoadFile(path, "", {});
      FAIL() << "a truncated artifact was loaded";
    } catch (const PolicyError& e) {
      ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
      EXPECT_EQ(e.diagnostics().items()[0].code, codes::kBadArtifact) << e.what();
      EXPECT_NE(e.diagnostics().items()[0].message.find("truncated: " + std::to_string(n) + " bytes"), std::string::npos)
          << e.what();
    }
  }
  // By content alone (any name): the magic's first five bytes make an artifact.
  EXPECT_TRUE(LooksLikeArtifact(good.substr(0, 5), "x.gpol"));
  EXPECT_TRUE(LooksLikeArtifact(good.substr(0, 6), ""));
  EXPECT_FALSE(LooksLikeArtifact(good.substr(0, 4), "x.gpol"));
  EXPECT_TRUE(LooksLikeArtifact(good.substr(0, 4), "x.gpolc"));
  EXPECT_TRUE(LooksLikeArtifact("", "x.gpolc"));
  EXPECT_FALSE(LooksLikeArtifact("", "x.gpol"));
  EXPECT_FALSE(LooksLikeArtifact("guardpolicy 1\n", "x.gpolc"));
}

}  // namespace
}  // namespace guardpolicy
