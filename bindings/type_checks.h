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
// The shortcut is taken only when it is the same answer:
//   - a value whose type subclasses the class is an instance (every metaclass here agrees);
//   - when the class's metaclass does not override __instancecheck__ (torch._C._TensorMeta,
//     type), and nothing on the value type's MRO overrides `__class__` (object's descriptor
//     is found), a value whose type does not subclass the class is not an instance;
//   - for torch.nn.Parameter, whose metaclass's __instancecheck__ is torch's own
//     `_ParameterMeta.__instancecheck__` (it adds tensors with a true `_is_param`, then
//     defers to type's), a value that is not a torch.Tensor instance by the rule above is
//     not a Parameter.
// Every other case calls PyObject_IsInstance. CPython 3.11-3.13 (the shortcuts use
// _PyType_Lookup); other versions always call PyObject_IsInstance. Needs the GIL. Errors:
// a Python exception from __instancecheck__ propagates as pybind11::error_already_set.
#pragma once

#include <pybind11/pybind11.h>

namespace guardpolicy::python {

// torch.Tensor, torch.nn.Parameter, torch.nn.Module: imported on first use, never freed.
struct TorchTypes {
  PyObject* tensor = nullptr;
  PyObject* parameter = nullptr;
  PyObject* module = nullptr;
};
const TorchTypes& Torch();

bool IsTensor(pybind11::handle value);
bool IsParameter(pybind11::handle value);
bool IsModule(pybind11::handle value);

// Turns the shortcuts off (or back on) for the process: tests compare both answers.
void SetTypeCheckShortcuts(bool enabled);

}  // namespace guardpolicy::python
