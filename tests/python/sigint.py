"""SIGINT in the tests that send one, whatever started the test run.

A shell without job control starts a background command (``nohup make test &`` in a script,
some CI runners) with SIGINT ignored. An ignored signal stays ignored across fork and exec,
so a child would never see the SIGINT a test sends it, and a Python started with SIGINT
ignored installs no handler for it (no KeyboardInterrupt, even for ``signal.raise_signal``).
A signal that is *caught* is reset to its default action by exec.

* ``popen``: ``subprocess.Popen`` whose child starts with SIGINT at its default action (a
  Python child raises KeyboardInterrupt on one). When this process ignores SIGINT, it is
  caught by a handler that does nothing while the child starts (so this process goes on
  ignoring it, in effect), then ignored again. No Python runs in the child before exec (a
  ``preexec_fn`` would, which is unsafe beside torch's threads). Call it from the main
  thread.
* ``python_handler()``: Python's own handler (``signal.default_int_handler``) in this process
  for a block: a SIGINT raised in the test process raises KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from typing import Any, Iterator


def _do_nothing(signum: int, frame: Any) -> None:
    pass


def popen(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)``, the child's SIGINT at its default action."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # caught or default: so is the child's
        return subprocess.Popen(args, **kwargs)
    signal.signal(signal.SIGINT, _do_nothing)
    try:
        return subprocess.Popen(args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def python_handler() -> Iterator[None]:
    """``signal.default_int_handler`` for SIGINT in this process while the block runs."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous is not None:  # None: not set from Python; nothing to put back
            signal.signal(signal.SIGINT, previous)
