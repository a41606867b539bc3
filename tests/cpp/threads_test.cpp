// threads_test.cpp: one compiled policy evaluated by 8 threads at once decides like one
// thread (run under TSan by `make test-tsan`).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <thread>

#include "test_util.h"

namespace guardpolicy {
namespace {

TEST(Threads, EightThreadsShareOneCompiledPolicy) {
  Loader loader = testing::MakeLoader();
  const auto root = std::filesystem::path(testing::kDataDir).parent_path();
  auto policy = loader.Load(SourceFileFromPath((root / "tests/corpus/accept/operators.gpol").string()), "", {});
  const Program& program = policy->program();
  const auto& members = testing::TestSchema()->enums()[0].members;
  const std::vector<std::string> names = {"x", "self.layers3.weight", "kv_cache", "G['CONFIG']", ""};
  std::mt19937 rng(7);
  std::vector<std::vector<Value>> views;
  for (int i = 0; i < 2000; ++i) {
    std::vector<Value> v(program.image().fields.size() + 1);
    for (size_t s = 0; s < program.image().fields.size(); ++s) {
      const int pick = static_cast<int>(rng() % members.size());
      v[s] = Value{program.image().field_types[s].kind == TypeKind::kEnum ? pick : static_cast<int64_t>(rng() % 8),
                   rng(), names[rng() % names.size()]};
      if (program.image().field_types[s].kind == TypeKind::kEnum) v[s].s = members[pick];
    }
    views.push_back(std::move(v));
  }
  std::vector<Outcome> expected;
  for (const auto& v : views) expected.push_back(Evaluate(program, v.data()));
  std::vector<int> mismatches(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < views.size(); ++i) {
          const Outcome o = Evaluate(program, views[i].data());
          mismatches[t] += o.decision != expected[i].decision || o.rule != expected[i].rule;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace guardpolicy
