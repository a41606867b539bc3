// check_cmd.cpp: `guardpolicy check POLICY --guards SNAPSHOT [--explain] [--policy NAME]`:
// a policy's decisions on guards recorded from a real model, without torch.
#include <fmt/format.h>

#include "cli.h"
#include "context.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/extension_host.h"
#include "guardpolicy/snapshot.h"
#include "guardpolicy/vm.h"

namespace guardpolicy::cli {
namespace {

// The deciding rule as disasm and Python's RuleRef print it: "policy at file:line".
std::string RuleText(const Program& p, const Outcome& o) {
  if (o.rule < 0) return fmt::format("default at {}:{}", p.image().default_file, p.image().default_line);
  return RuleLabel(p.image().rules[o.rule]);
}

// The guard's `code` field under its line, one code part a line ("" in older snapshots).
void PrintCode(const Context& ctx, const FieldValues& entry) {
  auto it = entry.find("code");
  if (it == entry.end()) return;
  std::string_view code = it->second.s;
  while (!code.empty()) {
    const size_t nl = code.find('\n');
    *ctx.out << fmt::format("         | {}\n", code.substr(0, nl));
    code = nl == std::string_view::npos ? std::string_view() : code.substr(nl + 1);
  }
}

// "N guards in F frames: K kept, D dropped", with "W watched" between when any was.
std::string Summary(const std::string& policy, const size_t counts[kDecisionCount], size_t frames) {
  const size_t kept = counts[static_cast<int>(Decision::kKeep)];
  const size_t dropped = counts[static_cast<int>(Decision::kDrop)];
  const size_t watched = counts[static_cast<int>(Decision::kWatch)];
  return fmt::format("policy `{}`: {} guards in {} frames: {} kept, {}{} dropped\n", policy,
                     kept + watched + dropped, frames, kept,
                     watched ? fmt::format("{} watched, ", watched) : "", dropped);
}

}  // namespace

int RunCheck(const Context& ctx, const std::string& policy_path, const std::string& policy,
             const std::string& guards, bool explain) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  std::shared_ptr<const CompiledPolicy> compiled;
  Snapshot snap;
  try {
    compiled = loader->LoadFile(policy_path, policy, {});
    snap = LoadSnapshot(guards, loader->schema());
  } catch (const PolicyError& e) {
    return ReportLoadError(ctx, e);
  }
  const Program& prog = compiled->program();
  size_t counts[kDecisionCount] = {};
  HostStrings strings;
  for (size_t f = 0; f < snap.frames.size(); ++f) {
    const SnapshotFrame& frame = snap.frames[f];
    if (explain) *ctx.out << fmt::format("frame {} {} [{}]\n", f, frame.code, frame.compile_id);
    // One frame is one guard_filter_fn call: filters see its entries together.
    const std::vector<Outcome> outcomes = EvaluateEntries(prog, loader->schema(), frame.entries, strings);
    for (size_t i = 0; i < frame.entries.size(); ++i) {
      const FieldValues& entry = frame.entries[i];
      const Outcome& o = outcomes[i];
      counts[static_cast<int>(o.decision)] += 1;
      if (!explain) continue;
      *ctx.out << fmt::format("  {:<5} {:<28} {:<40} {}\n", DecisionName(o.decision),
                              entry.at("guard_type").s, entry.at("name").s, RuleText(prog, o));
      PrintCode(ctx, entry);
    }
  }
  *ctx.out << Summary(compiled->name(), counts, snap.frames.size());
  return kExitClean;
}

}  // namespace guardpolicy::cli
