// py_policy.cpp: evaluating entry lists with a CompiledPolicy (see py_policy.h): the
// extractor kept between calls, the filters, the on_error decision and its warning.
#include "py_policy.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "guardpolicy/plugin.h"
#include "guardpolicy/runtime_settings.h"
#include "guardpolicy/vm.h"

namespace py = pybind11;

namespace guardpolicy::python {
namespace {

// Whether a Python exception raised while reading entries is a failure to read them (an
// Exception: on_error decides) rather than a request to stop (KeyboardInterrupt, SystemExit,
// GeneratorExit and other BaseExceptions, which always propagate).
bool IsEntryFailure(const py::error_already_set& e) { return e.matches(PyExc_Exception); }

// Runs the handlers of signals that arrived while C++ read entries (a Ctrl-C), so that what
// they raise ends the call: between entries, and before e.what() formats a failure (that
// runs Python code, and pybind11 would swallow a KeyboardInterrupt raised there).
void StopOnSignal() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// The entries a call failed to read: the first failure's message and how many.
struct Failures {
  std::string first;
  size_t count = 0;
  void Add(const char* what, size_t entries) {
    if (count == 0) first = what;
    count += entries;
  }
};

// Runs the plan's filters over the whole list, before any entry is decided. A failure
// raises when `raise`, else counts for every entry and returns false.
bool RunFilters(EntryExtractor& extractor, const py::tuple& items, bool from_mappings, bool raise,
                Failures& failures) {
  try {
    extractor.RunFilters(items, from_mappings);
  } catch (py::error_already_set& e) {
    if (raise || !IsEntryFailure(e)) throw;
    StopOnSignal();
    failures.Add(e.what(), items.size());
    return false;
  } catch (const std::exception& e) {
    if (raise) throw;
    failures.Add(e.what(), items.size());
    return false;
  }
  return true;
}

// The outcome of entry `i`, or `on_error` when it cannot be read (raised instead when `raise`).
Outcome Decide(const Program& prog, LazyEntryView& lazy, py::handle entry, size_t i,
               Outcome on_error, bool raise, Failures& failures) {
  try {
    lazy.Reset(entry, i);
    return EvaluateView(prog, lazy);
  } catch (py::error_already_set& e) {
    if (raise || !IsEntryFailure(e)) throw;
    StopOnSignal();
    failures.Add(e.what(), 1);
  } catch (const PluginError& e) {
    if (raise) throw;
    failures.Add(e.what(), 1);
  } catch (const std::exception& e) {  // e.g. pybind11::cast_error on a wrong attribute type
    if (raise) throw py::type_error(std::string("entry ") + std::to_string(i) + ": " + e.what());
    failures.Add(e.what(), 1);
  }
  return on_error;
}

}  // namespace

py::list PyPolicy::Call(py::handle entries) const {
  // Decisions are kept in C++ until the end: a list made up front would be reachable
  // (through the garbage collector) by Python code a field read runs, half filled.
  struct DecisionSink {
    std::vector<uint8_t> keep;
    void Start(size_t n) { keep.resize(n); }
    void Set(size_t i, Outcome o) { keep[i] = KeptByTorch(o.decision); }
  } sink;
  Run(entries, false, false, sink);
  py::list out(sink.keep.size());
  for (size_t i = 0; i < sink.keep.size(); ++i) out[i] = py::bool_(sink.keep[i] != 0);
  return out;
}

std::vector<std::pair<const char*, int>> PyPolicy::Explain(py::handle entries, bool from_mappings,
                                                           bool strict) const {
  struct VectorSink {
    std::vector<std::pair<const char*, int>> out;
    void Start(size_t n) { out.resize(n); }
    void Set(size_t i, Outcome o) { out[i] = {DecisionName(o.decision), o.rule}; }
  } sink;
  Run(entries, from_mappings, strict, sink);
  return std::move(sink.out);
}

template <class Sink>
void PyPolicy::Run(py::handle entries, bool from_mappings, bool strict, Sink& sink) const {
  const Program& prog = policy_->program();
  // A snapshot of the entries: Python code run while reading them cannot change the list.
  py::tuple items = py::reinterpret_steal<py::tuple>(PySequence_Tuple(entries.ptr()));
  if (!items) throw py::error_already_set();
  const size_t n = items.size();
  const Outcome on_error{policy_->on_error() == OnError::kDrop ? Decision::kDrop : Decision::kKeep,
                         -1};
  sink.Start(n);
  // The extractor of the last call, reset, or a new one (a call running meanwhile, from
  // another thread or from Python code a field ran, has taken it). Swapped under the GIL.
  std::unique_ptr<EntryExtractor> owned = std::move(spare_extractor_);
  if (!owned) owned = std::make_unique<EntryExtractor>(*plan_);
  EntryExtractor& extractor = *owned;
  extractor.SetMappings(from_mappings);
  LazyEntryView lazy(extractor);
  const bool raise = strict || policy_->on_error() == guardpolicy::OnError::kRaise;
  Failures failures;
  // Filters see the whole list at once, before any entry is decided.
  const bool filters_ok =
      !plan_->has_filters || RunFilters(extractor, items, from_mappings, raise, failures);
  for (size_t i = 0; i < n && filters_ok; ++i) {
    StopOnSignal();
    sink.Set(i, Decide(prog, lazy, items[i], i, on_error, raise, failures));
  }
  if (!filters_ok) {
    for (size_t i = 0; i < n; ++i) sink.Set(i, on_error);
  }
  extractor.Reset();
  spare_extractor_ = std::move(owned);
  if (failures.count > 0) {
    py::module_::import("guardpolicy.errors")
        .attr("warn_internal_failure")(policy_->name(), failures.first,
                                       OnErrorName(policy_->on_error()), failures.count, n);
  }
}

}  // namespace guardpolicy::python
