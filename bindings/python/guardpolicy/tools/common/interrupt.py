"""Ctrl-C in a tool: one line on stderr saying what was done, and exit status 130 (128 +
SIGINT, what a shell reports), instead of a traceback. The tools write their output files
whole at the end (``_files.write_file``: a temporary file, then a rename), so an interrupted
run leaves every output as it was."""

from __future__ import annotations

import sys

#: The exit status of a tool ended by Ctrl-C.
INTERRUPTED = 130


def interrupted(tool: str, done: str) -> int:
    """Prints ``TOOL: interrupted (Ctrl-C); DONE`` on stderr (after clearing a progress line
    on a terminal) and returns ``INTERRUPTED``."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    print(f"{tool}: interrupted (Ctrl-C); {done}", file=sys.stderr, flush=True)
    return INTERRUPTED
