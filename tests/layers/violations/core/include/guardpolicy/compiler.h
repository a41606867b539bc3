// The code generator (stand-in).
#pragma once
