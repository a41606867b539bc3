// call_layer.h: guardpolicy._core.CallLayer, the C part of verify's per-call path
// (guardpolicy.runtime.call.call_path.CallPath subclasses it).
//
// A call of a CallLayer counts itself on its `stats` (the object's runtime.call.stance.Stance:
// stats.call_count += 1, a Python int), and on every stats.verify_every-th call first calls
// self._sampled(call, *args, **kwargs); then it
// vectorcalls `inner` (torch's compiled callable) with the call's own arguments and, when the
// `pending` list (verify.Guards.pending) is not empty, calls self._settle() afterwards, also
// when `inner` raised (a try/finally). When `inner` raises a RuntimeError, the call returns
// self._failed(exception, *args, **kwargs) instead (which re-raises what it cannot recover).
// An unsampled call runs no Python code of guardpolicy: two attribute reads, one write and a
// list length, in C.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// Adds the type CallLayer(inner, stats, pending) to `m`. Raises error_already_set.
void BindCallLayer(pybind11::module_& m);

}  // namespace guardpolicy::python
