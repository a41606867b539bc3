// The policy glue, reaching the module's plumbing.
#pragma once
#include "module/data_dirs.h"
