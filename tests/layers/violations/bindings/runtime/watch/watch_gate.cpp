// A per-call type, reaching the policy glue (and through it the module's plumbing).
#include "policy/py_policy.h"
