// The pybind11 module, reaching the command line.
#include "cli.h"
