// compiler.h: the compile stage: a checked policy's linked rules -> ProgramImage (bytecode.h).
//
// Parameters are bound to constants at compile time (`params` overrides the declared
// defaults); the rules come from the link stage (linker.h: `use` expanded in place, first
// match deciding). Conditions compile to short-circuit branches, so a rule costs only the
// tests it needs. Precondition: the module containing the policy passed Check() without
// errors.
#pragma once

#include <map>
#include <string>

#include "guardpolicy/ast.h"
#include "guardpolicy/bytecode.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/options.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// Returns the unverified image of `linked` (the policy's open link, LinkOpen) with the
// policy's own parameters bound; problems (too many rules, a `use` the linker left out, a
// bad parameter value) go to `diags`.
ProgramImage Compile(const LinkedPolicy& linked, const Schema& schema, const ParamValues& params,
                     Diagnostics& diags, const CompileOptions& options = {});

}  // namespace guardpolicy
