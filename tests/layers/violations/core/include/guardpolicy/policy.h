// The facade (made up: only its name matters here).
#pragma once
