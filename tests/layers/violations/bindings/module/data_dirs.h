// The module's plumbing.
#pragma once
