// source_path.h: a guard's source chain -> the schema fields `path` and `module_path`.
//
// `path` names the guarded value as nn.Module's named_modules() / named_parameters() /
// named_buffers() spell it under the compiled frame's `self` (`blocks.0.0.weight`), with a
// documented prefix for the other roots (docs/schema.md, "Real names"):
//   ""              the frame's `self` when it is an nn.Module (a LocalSource "self" that an
//                   NNModuleSource kind wraps): the module whose forward is compiled
//   "input:NAME"    another local of the compiled frame (its arguments: `input:x`,
//                   `input:args[0]`)
//   "closure:NAME"  a free or cell variable of the compiled frame
//   "global:NAME"   a global of the compiled frame's module (torch's own `__import_*` and
//                   `__builtins_dict___0` names included)
// then per link: `.NAME` for an attribute and for an item of a module's `_modules`,
// `_parameters` or `_buffers` (a submodule, parameter or buffer), `[KEY]` (KEY's repr) for
// a dict or sequence item, `.__closure__`, `.__code__`, `.__defaults__[I]`,
// `.__kwdefaults__['K']`. A chain with a link outside these (type(), __dict__, __mro__,
// dict keys, tensor sizes, ...) or another root has path "".
// `module_path` is the path of the last nn.Module on the chain (the guarded value itself
// when it is one; an NNModuleSource kind marks a module), "" when there is none.
//
// Source classes are told apart by their exact names (torch._dynamo.source, checked on
// 2.13.0 and 2.14.1), so a class torch adds later has path "" until it is listed here.
// Public CPython API only. Errors: Python exceptions propagate as error_already_set.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace guardpolicy::python {

class SourcePaths {
 public:
  struct Paths {
    std::string path;
    std::string module_path;
  };

  // The paths of `originating_source` (a torch._dynamo.source.Source).
  Paths Of(pybind11::handle originating_source);
  // Forgets the per-type cache; call when the sources seen so far may be freed.
  void Clear() { kinds_.clear(); }

 private:
  enum class Kind : uint8_t {
    kOther, kLocal, kGlobal, kAttr, kModule, kSame, kDictItem, kItem, kClosure, kCode, kDefaults,
  };
  Kind KindOf(pybind11::handle node);

  std::unordered_map<PyObject*, Kind> kinds_;  // by type object; valid while those types live
};

}  // namespace guardpolicy::python
