// test_util.h: shared fixtures for the C++ tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "guardpolicy/plugin_loader.h"
#include "guardpolicy/policy.h"
#include "guardpolicy/vm.h"

namespace guardpolicy::testing {

inline const std::string kDataDir = GUARDPOLICY_SOURCE_DATA_DIR;

// `name` in a directory of this process and test alone (under ::testing::TempDir(), created
// on first use, removed when the process exits), so two ctest runs sharing /tmp, or two tests
// writing the same name, do not meet.
inline std::string TestTempPath(const std::string& name) {
  struct Dirs {
    std::vector<std::filesystem::path> made;
    ~Dirs() {
      std::error_code ec;
      for (const auto& d : made) std::filesystem::remove_all(d, ec);
    }
  };
  static Dirs dirs;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "global";
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("guardpolicy_" + std::to_string(::getpid()) + "_" + test);
  if (std::filesystem::create_directories(dir)) dirs.made.push_back(dir);
  return (dir / name).string();
}

inline std::shared_ptr<const Schema> TestSchema() {
  static auto schema =
      std::make_shared<const Schema>(Schema::FromFile(kDataDir + "/schema/guard_entry.yaml"));
  return schema;
}

// The schema with the example plugins (plugins/examples: modinfo, names) that
// policies/examples/ use.
inline std::shared_ptr<const Schema> PluginSchema() {
  static auto schema = std::make_shared<const Schema>(
      TestSchema()->WithPlugin(LoadPlugin(std::string(GUARDPOLICY_EXAMPLE_PLUGIN_DIR) + "/libgp_modinfo.so"))
          .WithPlugin(LoadPlugin(std::string(GUARDPOLICY_EXAMPLE_PLUGIN_DIR) + "/libgp_names.so")));
  return schema;
}

inline SourceFilePtr Src(std::string text, std::string path = "test.gpol") {
  return std::make_shared<const SourceFile>(std::move(path), std::move(text));
}

inline Loader MakeLoader() { return Loader(TestSchema(), kDataDir + "/std"); }

// `image` linked against TestSchema(). Throws LinkError.
inline Program Linked(ProgramImage image) { return Program::Link(std::move(image), *TestSchema()); }

// A program that only holds `patterns` (its code decides keep), linked against TestSchema().
// Throws LinkError (kBadRegex for a pattern RE2 refuses).
inline Program RegexProgram(const std::vector<std::string>& patterns) {
  ProgramImage image;
  image.code = {{Opcode::kDecide, 0, -1}};
  image.regexes = patterns;
  return Program::Link(std::move(image), *TestSchema());
}

// Codes of all diagnostics, in order, for compact assertions.
inline std::vector<std::string> Codes(const Diagnostics& ds) {
  std::vector<std::string> out;
  for (const auto& d : ds.items()) out.push_back(d.code);
  return out;
}

// Codes of the errors only (analysis warnings filtered out).
inline std::vector<std::string> ErrorCodes(const Diagnostics& ds) {
  std::vector<std::string> out;
  for (const auto& d : ds.items()) {
    if (d.severity == Severity::kError) out.push_back(d.code);
  }
  return out;
}

inline bool HasCode(const Diagnostics& ds, std::string_view code) {
  for (const auto& d : ds.items()) {
    if (d.code == code) return true;
  }
  return false;
}

// An entry view built field by field, matching a program's slots.
class Entry {
 public:
  Entry& Set(std::string field, Value v) {
    values_[std::move(field)] = v;
    return *this;
  }
  Entry& Str(std::string field, std::string_view s) { return Set(std::move(field), Value{0, 0, s}); }
  Entry& Bool(std::string field, bool b) { return Set(std::move(field), Value{b ? 1 : 0, 0, {}}); }
  Entry& Int(std::string field, int64_t i) { return Set(std::move(field), Value{i, 0, {}}); }
  Entry& Enum(std::string field, const std::string& enum_name, std::string_view member) {
    const auto& e = TestSchema()->enums()[TestSchema()->FindEnum(enum_name)];
    return Set(std::move(field), Value{e.Find(member), 0, member});
  }

  Outcome Run(const Program& p) const {
    std::vector<Value> view(p.image().fields.size() + 1);
    for (size_t i = 0; i < p.image().fields.size(); ++i) {
      auto it = values_.find(p.image().fields[i]);
      if (it != values_.end()) view[i] = it->second;
    }
    return Evaluate(p, view.data());
  }

 private:
  std::map<std::string, Value> values_;
};

}  // namespace guardpolicy::testing
