"""``python -m guardpolicy``: every subcommand, the C++ ones and the Python tools.

``lint``, ``fmt``, ``test``, ``compile``, ``disasm``, ``check`` and ``filters`` run the C++
command line inside this process (the installed ``guardpolicy`` command is that C++ program
itself, tools/cli); ``capture``, ``bench``, ``audit``, ``suggest`` and ``demo`` are the Python tools (they
need torch), reached only this way. ``$GUARDPOLICY_DATA_DIR`` overrides the package's schema
and std policies.
"""

from __future__ import annotations

import importlib
import os
import sys

from . import _core
from .loading import DATA_DIR

#: Subcommands implemented in Python: name -> module with main(argv) -> int.
PYTHON_TOOLS = {"capture": "tools.capture", "bench": "tools.bench", "audit": "tools.audit",
                "suggest": "tools.suggest", "demo": "tools.demo"}


def main(argv: list[str] | None = None) -> int:
    """Runs ``guardpolicy`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code
    (0 clean, 1 findings, 2 usage or I/O error)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in PYTHON_TOOLS:
        module = importlib.import_module(f"guardpolicy.{PYTHON_TOOLS[args[0]]}")
        return module.main(args[1:])
    data_dir = os.environ.get("GUARDPOLICY_DATA_DIR") or str(DATA_DIR)
    # File names are bytes to the C++ side, so names that are not UTF-8 still work.
    return _core.run_cli([os.fsencode(a) for a in args], os.fsencode(data_dir))


if __name__ == "__main__":
    sys.exit(main())
