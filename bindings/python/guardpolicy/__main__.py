"""``python -m guardpolicy``: the same command as the ``guardpolicy`` console script."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
