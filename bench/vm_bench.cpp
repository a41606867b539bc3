// vm_bench.cpp: ns per guard entry of the VM (-O1, -O0) and of the reference AST
// interpreter, for each std policy and a realistic 30-rule policy, over guard entries
// captured from real models (bench/data/entries.json.gz). Each benchmark evaluates every
// row once per iteration; the counter `ns_per_entry` is what bench/DETAILS.md reports.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "../tests/cpp/reference_interpreter.h"
#include "entry_rows.h"

namespace guardpolicy::bench {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = fs::path(GUARDPOLICY_SOURCE_DATA_DIR).parent_path();

const Schema& TheSchema() {
  static const auto schema = std::make_shared<const Schema>(Schema::FromFile(kRoot / "policies/schema/guard_entry.yaml"));
  return *schema;
}
std::shared_ptr<const Schema> SchemaPtr() {
  static const auto schema = std::shared_ptr<const Schema>(&TheSchema(), [](const Schema*) {});
  return schema;
}

const EntryRows& Rows() {
  static const EntryRows rows((kRoot / "bench/data/entries.json.gz").string(), TheSchema());
  return rows;
}

struct Case {
  std::string name;
  std::string path;
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const char* std_name : {"skip_guard_on_inbuilt_nn_modules", "skip_guard_on_all_nn_modules",
                               "keep_tensor_guards", "skip_guard_on_globals", "keep_portable_guards",
                               "skip_all_guards"}) {
    out.push_back({std_name, (kRoot / "policies/std" / (std::string(std_name) + ".gpol")).string()});
  }
  out.push_back({"rules30", (kRoot / "bench/policies/rules30.gpol").string()});
  return out;
}

void Report(benchmark::State& state) {
  const double entries = static_cast<double>(Rows().rows().size());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * entries));
  state.counters["ns_per_entry"] = benchmark::Counter(
      entries * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_Vm(benchmark::State& state, const Case& c, int opt_level) {
  CompileOptions options;
  options.opt_level = opt_level;
  Loader loader(SchemaPtr(), (kRoot / "policies/std").string(), options);
  auto policy = loader.Load(SourceFileFromPath(c.path), "", {});
  const Program& program = policy->program();
  const std::vector<Value> views = Rows().Views(program);
  const size_t width = program.image().fields.size(), n = Rows().rows().size();
  for (auto _ : state) {
    int drops = 0;
    for (size_t r = 0; r < n; ++r) drops += Evaluate(program, views.data() + r * width).decision == Decision::kDrop;
    benchmark::DoNotOptimize(drops);
  }
  Report(state);
}

void BM_Reference(benchmark::State& state, const Case& c) {
  Loader loader(SchemaPtr(), (kRoot / "policies/std").string());
  auto file = SourceFileFromPath(c.path);
  auto lint = loader.Lint(file);
  const PolicyDecl& decl = lint.module->policies.front();
  testing::ReferenceInterpreter ref(TheSchema(), loader);
  for (auto _ : state) {
    int drops = 0;
    for (const auto& row : Rows().rows()) drops += ref.Run(decl, {}, row).decision == Decision::kDrop;
    benchmark::DoNotOptimize(drops);
  }
  Report(state);
}

const bool kRegistered = [] {
  for (const Case& c : Cases()) {
    benchmark::RegisterBenchmark(("vm_O1/" + c.name).c_str(), [c](benchmark::State& s) { BM_Vm(s, c, 1); });
    benchmark::RegisterBenchmark(("vm_O0/" + c.name).c_str(), [c](benchmark::State& s) { BM_Vm(s, c, 0); });
    benchmark::RegisterBenchmark(("reference/" + c.name).c_str(), [c](benchmark::State& s) { BM_Reference(s, c); });
  }
  return true;
}();

}  // namespace
}  // namespace guardpolicy::bench

BENCHMARK_MAIN();
