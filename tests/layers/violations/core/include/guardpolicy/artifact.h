// The artifact, wrongly reaching the facade (and through it the syntax tree).
#pragma once
#include "guardpolicy/policy.h"
