// The VM, reaching the syntax tree through bytecode.h.
#include "guardpolicy/bytecode.h"
