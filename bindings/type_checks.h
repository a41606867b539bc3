// type_checks.h: isinstance(value, torch.Tensor | torch.nn.Parameter | torch.nn.Module) for
// the value.is_* fields, exactly as Python answers it, without calling into Python where
// the answer follows from the types alone.
//
// PyObject_IsInstance on a class that is not the value's type looks up the metaclass's
// __instancecheck__ (a bound method each time) and calls it, and type.__instancecheck__
// then reads `value.__class__`: about 100 ns for a dict or a module checked against
// torch.Tensor, and about 300 ns against torch.nn.Parameter, whose metaclass
// (torch.nn.parameter._ParameterMeta, torch 2.0-2.13) runs Python code. Most guarded values
// are not tensors, so the value.is_* fields spent most of their time there.
//
// The shortcut is taken only when it is the same answer. "Its own __class__" below means:
// the value's attribute lookup is object's (no `__getattribute__` of its own; a
// `__getattr__` runs only on a miss) and finds object's `__class__` descriptor.
//   - when the class's metaclass does not override __instancecheck__ (torch._C._TensorMeta,
//     type), a value whose type subclasses the class is an instance, and one with its own
//     __class__ whose type does not is not;
//   - for torch.nn.Parameter, whose metaclass's __instancecheck__ is torch's own
//     `_ParameterMeta.__instancecheck__` (recognized by its bytecode, names, closure and
//     globals; it adds tensors with a true `_is_param`, then defers to type's), for a value
//     with its own __class__: a Parameter subtype is one, a non-tensor is not, and a tensor
//     is one exactly when `getattr(value, "_is_param", False)` is true (what that method
//     computes, without running it); an exact torch.nn.Parameter always is (isinstance's
//     own first test).
// Every other case calls PyObject_IsInstance. CPython 3.11-3.13 (the shortcuts use
// _PyType_Lookup); other versions always call PyObject_IsInstance. Needs the GIL. Errors:
// a Python exception from __instancecheck__ propagates as pybind11::error_already_set.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// torch.Tensor, torch.nn.Parameter, torch.nn.Module, as `torch` names them when the check
// runs (looked up once per call, see BeginCall).
enum class TorchKind { kTensor, kParameter, kModule };

// isinstance(value, class of `kind`) from the types alone (1 or 0), or -1 when only
// isinstance can tell; then CallIsInstance asks it (Python code may run: a metaclass check,
// a `__getattribute__`; its exception propagates as pybind11::error_already_set).
int IsInstanceFromTypes(pybind11::handle value, TorchKind kind);
bool CallIsInstance(pybind11::handle value, TorchKind kind);

// A policy call starts: what is checked once per call (torch's classes, the environment of
// torch's Parameter check) is checked again.
void BeginCall();

// Turns the shortcuts off (or back on) for the process: tests compare both answers.
void SetTypeCheckShortcuts(bool enabled);

}  // namespace guardpolicy::python
