// The code generator, wrongly including the checker's private header.
#include "../checker/expr_checker.h"
