// entry_fields.h: an entry given as literals (a `test` block's `expect`, the analysis'
// ambient guards) as the field values the VM reads.
#pragma once

#include "guardpolicy/evaluator.h"
#include "guardpolicy/schema.h"
#include "guardpolicy/snapshot.h"

namespace guardpolicy {

// The values of the fields `entry` gives (fields the schema lacks are skipped: the checker
// reported them); the `guard_source.is_*` predicates follow from `guard_source` unless
// given. The strings point into `entry`, which must outlive the result.
FieldValues FieldsOf(const EntryLiterals& entry, const Schema& schema);

}  // namespace guardpolicy
