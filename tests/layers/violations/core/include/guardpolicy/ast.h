// The syntax tree (stand-in).
#pragma once
