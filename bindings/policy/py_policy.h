// py_policy.h: guardpolicy._core.CompiledPolicy, a compiled policy bound to the schema it
// was compiled against.
//
// Calling one is torch's guard_filter_fn (a list of exactly `bool`, one per entry, True =
// keep); explain gives the decision and rule per entry. Each field is read from the entry as
// the program loads it (entry_extractor.h); an entry the binding cannot read gets the
// policy's on_error decision (`raise` re-raises), with one warning per call
// (guardpolicy.errors.warn_internal_failure). The read-only properties expose the policy's
// name, rules, parameters and runtime lines. Needs the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <utility>
#include <vector>

#include "entry_extractor.h"
#include "guardpolicy/compiled_policy.h"
#include "guardpolicy/schema.h"

namespace guardpolicy::python {

class PyPolicy {
 public:
  PyPolicy(std::shared_ptr<const CompiledPolicy> policy, std::shared_ptr<const Schema> schema)
      : policy_(std::move(policy)),
        schema_(std::move(schema)),
        plan_(std::make_shared<const ExtractorPlan>(policy_->program(), schema_)) {}

  // guard_filter_fn: one exact bool per entry, True = keep (a watch too: torch keeps it).
  pybind11::list Call(pybind11::handle entries) const;
  // [(decision: "keep", "drop" or "watch", rule_index or -1)] per entry.
  std::vector<std::pair<const char*, int>> Explain(pybind11::handle entries, bool from_mappings,
                                                   bool strict) const;

  const CompiledPolicy& policy() const { return *policy_; }
  const std::shared_ptr<const Schema>& schema() const { return schema_; }

 private:
  // Evaluates every entry into sink.Set(i, outcome) after sink.Start(n). An entry the
  // binding cannot read gets the policy's on_error decision (keep by default; `raise`
  // re-raises); the others are decided as usual. `strict` (evaluate) raises on an
  // unreadable row instead.
  template <class Sink>
  void Run(pybind11::handle entries, bool from_mappings, bool strict, Sink& sink) const;

  std::shared_ptr<const CompiledPolicy> policy_;
  std::shared_ptr<const Schema> schema_;
  std::shared_ptr<const ExtractorPlan> plan_;                // shared by every call (and thread)
  mutable std::unique_ptr<EntryExtractor> spare_extractor_;  // reused by the next call (GIL)
};

// Adds the type CompiledPolicy (PyPolicy) to `m`.
void BindCompiledPolicy(pybind11::module_& m);

}  // namespace guardpolicy::python
