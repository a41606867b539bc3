// The command line.
#pragma once
