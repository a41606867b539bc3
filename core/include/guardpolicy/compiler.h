// compiler.h: a checked policy -> ProgramImage (bytecode.h).
//
// Parameters are bound to constants at compile time (`params` overrides the declared
// defaults); `use` expands the used policy's rules in place, first match deciding.
// Conditions compile to short-circuit branches, so a rule costs only the tests it needs.
// Precondition: the module containing `policy` passed Check() without errors.
#pragma once

#include <map>
#include <string>

#include "guardpolicy/ast.h"
#include "guardpolicy/bytecode.h"
#include "guardpolicy/checker.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/linker.h"
#include "guardpolicy/options.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// Returns the unverified image; problems (too many rules, bad argument) go to `diags`.
ProgramImage Compile(const PolicyDecl& policy, const Module& module, const Schema& schema,
                PolicyResolver& resolver, const ParamValues& params, Diagnostics& diags,
                const CompileOptions& options = {});

}  // namespace guardpolicy
