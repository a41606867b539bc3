"""Progress on stderr for the long tools (``bench``, ``audit``, ``suggest``, ``demo``): one home.

On a terminal, a tqdm bar per phase (``step(label, i, n)``, or a message holding ``i/n``),
rewritten in place and cleared at the end; messages without a count replace the bar's
description. Off a terminal (a pipe, a CI log) nothing, unless ``lines=True``: then one line
per phase (a label seen before is not repeated), never one per step, so a log stays short.
tqdm is optional (the ``tools`` extra): without it a terminal gets the plain lines.

    progress = Progress("bench", lines=True)
    progress.step("mlp: timing round", 3, 15)
    progress("mlp, eager: auditing · 4/12 self.blocks")   # a callback for progress=...
    progress.done()
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

_COUNT = re.compile(r"(?:^|\s)(\d+)/(\d+)(?=\s|$)")


def on_terminal() -> bool:
    """Whether stderr is a terminal (the only place bars are drawn)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced stderr
        return False


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


def _tqdm() -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """Progress of one tool run (module docstring). ``prefix``: the tool's name, leading
    each line; ``enabled=False`` (``--quiet``): nothing at all; ``lines``: one line per phase
    off a terminal."""

    def __init__(self, prefix: str, enabled: bool = True, lines: bool = False):
        self.prefix = prefix
        self.enabled = enabled
        self.tty = enabled and on_terminal()
        self.lines = enabled and lines and not self.tty
        self._tqdm = _tqdm() if self.tty else None
        self._bar: Any = None
        self._label: str | None = None
        self._phase: str | None = None

    def __bool__(self) -> bool:
        """True when anything is shown (callers pass ``progress or None``)."""
        return self.tty or self.lines

    def step(self, label: str, i: int, n: int | None, detail: str = "") -> None:
        """Step ``i`` of ``n`` of the phase ``label`` (``n`` None: a count, no end known)."""
        if self.tty and self._tqdm is not None:
            if self._bar is None or label != self._label or n != self._bar.total:
                self._close()
                sized = _columns() > 0  # a terminal without a size (some CI ptys): tqdm would draw nothing
                self._bar = self._tqdm(total=n, desc=f"{self.prefix}: {label}", file=sys.stderr, leave=False,
                                       dynamic_ncols=sized, ncols=None if sized else 100,
                                       nrows=None if sized else 24)
                self._label = label
            self._bar.n = i
            self._bar.set_postfix_str(detail[:60], refresh=False)
            self._bar.refresh()
            return
        count = f"{i}/{n}" if n is not None else str(i)
        self._line(f"{self.prefix}: {label} {count}" + (f" {detail}" if detail else ""), label)

    def __call__(self, msg: str) -> None:
        """A message from a callback (``progress=``): a bar when it holds ``i/n``."""
        m = _COUNT.search(msg)
        if m and self.tty and self._tqdm is not None:
            label = msg[:m.start()].strip(" ·")
            self.step(label, int(m.group(1)), int(m.group(2)), msg[m.end():].strip(" ·"))
            return
        if self.tty and self._tqdm is not None:
            self._close()
            self._tqdm.write(f"{self.prefix}: {msg}", file=sys.stderr)
            return
        self._line(f"{self.prefix}: {msg}", msg[:m.start()] if m else msg)

    def _line(self, text: str, phase: str) -> None:
        if self.tty:  # no tqdm: the line rewritten in place
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
        elif self.lines and phase != self._phase:
            self._phase = phase
            sys.stderr.write(text + "\n")
            sys.stderr.flush()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar, self._label = None, None

    def done(self) -> None:
        """Clears the bar (or the line) from the terminal."""
        self._close()
        if self.tty and self._tqdm is None:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def for_terminal(prefix: str, quiet: bool = False) -> Progress | None:
    """The ``progress=`` callback of ``audit`` and ``suggest``: a ``Progress`` on a terminal,
    None elsewhere or with ``--quiet``."""
    p = Progress(prefix, enabled=not quiet)
    return p if p.tty else None
