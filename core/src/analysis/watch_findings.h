// watch_findings.h: GP3012, a `watch` that torch can only honour as a `keep`.
//
// A watched guard is checked when the state it reads changes: what its source reads must sit
// in a dict a watcher can see (a module's or object's `__dict__`, globals, a hook or class
// dict). Two kinds of guard read state held in no such dict, so they are checked on every
// call whatever the policy decides: the guards of inputs (a call passes its arguments anew:
// TENSOR_MATCH on an input tensor, CONSTANT_MATCH/EQUALS_MATCH/TYPE_MATCH on another input
// value, as GP3008 tells them apart), and the ambient guards of global state (grad mode, the
// shape environment, ...). The same formulas serve GP3008's risky drops.
#pragma once

#include <string_view>
#include <vector>

#include "formula.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy::analysis {

// TENSOR_MATCH on an input tensor: guard_source LOCAL, not a parameter.
FormulaPtr InputTensorGuard(Vocabulary& vocab);
// CONSTANT_MATCH, EQUALS_MATCH or TYPE_MATCH on an input that holds a value which is neither
// a tensor nor a module (a flag, a number, a `transformer_options`-style dict entry).
FormulaPtr InputValueGuard(Vocabulary& vocab);

// GP3012 at `site` (a watch rule, the `use` that brought one in, or `default watch`) for
// the ambient guard `types` it watches (some of kAmbientGuardTypes, formula.h: no ambient
// state is held in a dict); nothing when empty.
void ReportWatchedAmbient(const SourceRange& site, const std::vector<std::string_view>& types,
                          Diagnostics& diags);

// GP3012 at `site` for the input guard `types` it can watch (TENSOR_MATCH: an input tensor);
// nothing when empty.
void ReportWatchedInputs(const SourceRange& site, const std::vector<std::string_view>& types,
                         Diagnostics& diags);

}  // namespace guardpolicy::analysis
