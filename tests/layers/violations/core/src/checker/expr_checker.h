// The checker's private header (made up: only its name matters here).
#pragma once
