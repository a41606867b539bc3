// known_properties.h: recognizing a property whose getter is a plain attribute chain or a
// constant, so the extractor can read the chain (or the constant) instead of calling it.
//
// guard_source reads `entry.orig_guard.source`. On torch 2.13 `Guard.source` is a Python
// property, `return self.originating_source.guard_source`, and calling it (a Python frame)
// costs more than the rest of the field; reading the two attributes from C++ gives the same
// object. A property is recognized only when its getter's bytecode, names and constants are
// exactly those of `def f(self): return self.<first>.<second>` compiled by this interpreter,
// so any other body (an older torch's `guard_source()` call, a patched property) is called as
// before; so is a property subclass (its own __get__) and a type with its own
// `__getattribute__`. Remembered per type and version tag, and per getter code object (a
// modified type, or a getter given another `__code__`, is checked again). Needs the GIL.
// Errors: a failure while checking reads as "not recognized" (no exception escapes).
#pragma once

#include <Python.h>

namespace guardpolicy::python {

// Whether `type`.`name` is a property whose getter is `return self.<first>.<second>`.
// Remembers one (type, answer); the extractor asks it about one property (Guard.source).
bool IsAttributeChainProperty(PyTypeObject* type, const char* name, const char* first, const char* second);

// The value of `type`.`name` when that is a property whose getter is exactly
// `def f(self): return G.A` (bytecode, names and constants as compiled here), where G is a
// class found in the getter's module globals, A is a plain class attribute of G (no
// descriptor, no data descriptor on G's metaclass, whose __getattribute__ is type's): what the getter
// would return, without calling it. torch's root sources are such properties
// (`GlobalSource.guard_source` returns `GuardSource.GLOBAL`). Checked on every use: the same
// source type and version tag, G still bound to the same class in those globals, and G and
// its metaclass at their version tags. nullptr when it does not apply (call the property).
// Borrowed: the cache holds it. Needs the GIL; never raises.
PyObject* ConstantPropertyValue(PyTypeObject* type, PyObject* name);

}  // namespace guardpolicy::python
