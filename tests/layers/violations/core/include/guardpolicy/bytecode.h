// The bytecode, wrongly knowing the syntax tree.
#pragma once
#include "guardpolicy/ast.h"
