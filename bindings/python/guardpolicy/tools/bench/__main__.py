"""``python -m guardpolicy.tools.bench``: the same as ``python -m guardpolicy bench``."""

import sys

from .command import main

sys.exit(main())
