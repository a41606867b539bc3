"""``python -m guardpolicy.tools.audit``: the same as ``python -m guardpolicy audit``."""

import sys

from .command import main

sys.exit(main())
