// test_cmd.cpp: `guardpolicy test FILE...`.
#include <algorithm>

#include <fmt/format.h>

#include "cli.h"
#include "context.h"
#include "guardpolicy/test_runner.h"

namespace guardpolicy::cli {

int RunTest(const Context& ctx, const std::vector<std::string>& files) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  int passed = 0, failed = 0;
  int broken = kExitClean;
  for (const std::string& path : files) {
    try {
      for (const ExpectationResult& r : RunTests(*loader, SourceFileFromPath(path))) {
        const std::string decided_by = r.rule < 0 ? "the default" : fmt::format("rule {}", r.rule);
        if (r.passed()) {
          ++passed;
          *ctx.out << fmt::format("{}: PASS: policy `{}` {}\n", r.range.ToString(), r.policy,
                                  DecisionName(r.actual));
          continue;
        }
        ++failed;
        if (!r.error.empty()) {
          *ctx.out << fmt::format("{}: FAIL: policy `{}` could not decide: {}\n", r.range.ToString(), r.policy, r.error);
          continue;
        }
        *ctx.out << fmt::format("{}: FAIL: policy `{}` decided {} by {}{}, expected {}\n",
                                r.range.ToString(), r.policy, DecisionName(r.actual), decided_by,
                                r.rule_source.empty() ? "" : " at " + r.rule_source,
                                DecisionName(r.expected));
      }
    } catch (const PolicyError& e) {
      broken = std::max(broken, ReportLoadError(ctx, e));
    }
  }
  if (broken != kExitClean) return broken;  // a file that does not load: no tally to report
  *ctx.out << fmt::format("{} passed, {} failed\n", passed, failed);
  return failed ? kExitFindings : kExitClean;
}

}  // namespace guardpolicy::cli
