// The analysis, compiling the policy itself instead of asking evaluator.h.
#include "guardpolicy/compiler.h"
