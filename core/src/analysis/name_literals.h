// name_literals.h: strings compared with `name` that torch 2.13 never produces (GP3011).
//
// torch 2.13 (inline_inbuilt_nn_modules, the default) names a submodule of the compiled
// `self` as `self._modules['fc']`, a parameter `..._parameters['weight']`, a buffer
// `..._buffers['b']`, a ModuleList entry `._modules['0']`, and strips the local scope
// (`L['x']` is `x`). So `name == "self.fc.weight"`, `name startswith "self.layers.0."`,
// `name glob "self.fc.*"` and `name == "L['x']"` match no guard of a module tree: each
// is warned about, with the `path` spelling of the same thing as the help (docs/schema.md,
// "Real names"). A string whose first step from `self` is a plain attribute followed by
// another step (`self.A.B`, `self.A[0]`) is taken as such a module path: it would match
// only if `A` were no module.
#pragma once

#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy::analysis {

// Warns (GP3011) on the string literals the policy's own rules compare with `name` with
// ==, !=, in, startswith or glob (the part before the first wildcard) that torch never
// produces. Needs a checked policy (resolved paths).
void CheckNameLiterals(const PolicyDecl& policy, Diagnostics& diags);

}  // namespace guardpolicy::analysis
