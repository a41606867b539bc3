// known_properties.h: recognizing a property whose getter is a plain attribute chain, so the
// extractor can read the chain itself instead of calling the property.
//
// guard_source reads `entry.orig_guard.source`. On torch 2.13 `Guard.source` is a Python
// property, `return self.originating_source.guard_source`, and calling it (a Python frame)
// costs more than the rest of the field; reading the two attributes from C++ gives the same
// object. A property is recognized only when its getter's bytecode, names and constants are
// exactly those of `def f(self): return self.<first>.<second>` compiled by this interpreter,
// so any other body (an older torch's `guard_source()` call, a patched property) is called as
// before. Remembered per type and version tag (a modified type is checked again). Needs the
// GIL. Errors: a failure while checking reads as "not recognized" (no exception escapes).
#pragma once

#include <Python.h>

namespace guardpolicy::python {

// Whether `type`.`name` is a property whose getter is `return self.<first>.<second>`.
// `name`, `first` and `second` are identifiers; the same (name, first, second) must be
// passed for a given `site` (one small cache per site: 0 <= site < kPropertySites).
inline constexpr int kPropertySites = 1;
bool IsAttributeChainProperty(int site, PyTypeObject* type, const char* name, const char* first, const char* second);

}  // namespace guardpolicy::python
