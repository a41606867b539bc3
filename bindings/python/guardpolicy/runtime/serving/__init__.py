"""Ready to serve (docs/serving.md): what a serving loop needs besides the compiled model.

* ``check``: ``guardpolicy.would_recompile(compiled, *args, **kwargs)``, whether a call would
  be served by a cache entry of the first frame, asked of torch's guard managers without a
  call, naming each entry's failing guard (``naming``) on the frame locals the call binds
  (``frame``); ``coverage``: the same for a list of calls, as a table.
* ``scope``: ``with guardpolicy.serving(...)``: on this thread a call that would compile
  raises ``ServeTimeCompile`` (or compiles and logs), decided where guardpolicy's Dynamo
  callback runs, on cache misses only.
* ``cache_file``: ``guardpolicy.save_cache`` / ``load_cache``, torch's mega-cache with a
  header that says under what it was compiled.

Importing this package imports no torch (its modules import it where they run).
"""

from __future__ import annotations

from typing import Any

#: name -> module of this package that defines it (imported on first use).
_NAMES = {
    "would_recompile": "check", "WouldRecompile": "check", "EntryCheck": "check",
    "GuardFailure": "naming",
    "coverage": "coverage", "Coverage": "coverage", "CoverageRow": "coverage",
    "serving": "scope", "ServeTimeCompile": "scope",
    "save_cache": "cache_file", "load_cache": "cache_file", "CacheFileError": "cache_file",
    "CacheMismatch": "cache_file", "CacheLoad": "cache_file",
}


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
