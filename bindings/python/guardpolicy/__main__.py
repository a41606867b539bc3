"""``python -m guardpolicy``: the C++ subcommands of the ``guardpolicy`` command, plus the
Python tools (``capture``, ``bench``, ``audit``, ``demo``)."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
