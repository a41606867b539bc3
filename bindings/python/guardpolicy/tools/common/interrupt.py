"""Ctrl-C in a tool: one line on stderr saying what was done, and exit status 130 (128 +
SIGINT, what a shell reports), instead of a traceback. The tools write their output files
whole at the end (``_files.write_file``: a temporary file, then a rename), so an interrupted
run leaves every output as it was."""

from __future__ import annotations

import sys

#: The exit status of a tool ended by Ctrl-C.
INTERRUPTED = 130
#: How long after a Ctrl-C dropped in a finalizer it is raised again in the main thread, in seconds.
REDELIVER_S = 0.01


def deliver_from_finalizers() -> None:
    """Makes a Ctrl-C that lands in a finalizer or a weak reference's callback (a compiled
    object's cache entries retired as it dies, say) end the tool like any other: Python calls
    such an exception unraisable, prints it with a traceback and drops it. Here it is handed
    to the main thread again (``_thread.interrupt_main``), with nothing printed, from another
    thread ``REDELIVER_S`` later: raised while the hook still runs, it would be dropped too.
    Any other unraisable goes to the hook there was."""
    import _thread
    import time

    previous = sys.unraisablehook

    def later() -> None:
        time.sleep(REDELIVER_S)
        _thread.interrupt_main()

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _thread.start_new_thread(later, ())
        else:
            previous(unraisable)

    sys.unraisablehook = hook


def interrupted(tool: str, done: str) -> int:
    """Prints ``TOOL: interrupted (Ctrl-C); DONE`` on stderr (after clearing a progress line
    on a terminal) and returns ``INTERRUPTED``."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    print(f"{tool}: interrupted (Ctrl-C); {done}", file=sys.stderr, flush=True)
    return INTERRUPTED
