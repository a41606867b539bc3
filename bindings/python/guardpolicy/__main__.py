"""``python -m guardpolicy``: the CLI, plus the Python tools (``demo``, ``capture``)."""

from __future__ import annotations

import sys


def _main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "demo":
        from .demo import main as demo_main

        return demo_main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "capture":
        from .capture import main as capture_main

        return capture_main(sys.argv[2:])
    from .cli import main

    return main()


sys.exit(_main())
