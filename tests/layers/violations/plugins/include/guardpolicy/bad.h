/* A plugin header that includes a core header. */
#include "guardpolicy/bytecode.h"
