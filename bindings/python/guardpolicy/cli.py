"""``python -m guardpolicy``: every subcommand, the C++ ones and the Python tools.

``lint``, ``fmt``, ``test``, ``compile``, ``disasm``, ``check`` and ``filters`` run the C++
command line inside this process (the installed ``guardpolicy`` command is that C++ program
itself, tools/cli); ``capture``, ``bench``, ``audit``, ``suggest``, ``recompiles``, ``coverage``, ``demo`` and ``doctor`` are the Python tools (they
need torch), reached only this way. ``$GUARDPOLICY_DATA_DIR`` overrides the package's schema
and std policies.
"""

from __future__ import annotations

import importlib
import os
import sys

from . import _cli
from .api.loading import DATA_DIR

#: Subcommands implemented in Python: name -> module with main(argv) -> int.
PYTHON_TOOLS = {"capture": "tools.capture", "bench": "tools.bench", "audit": "tools.audit",
                "suggest": "tools.suggest", "demo": "tools.demo", "doctor": "tools.doctor",
                "recompiles": "tools.recompiles", "coverage": "tools.coverage"}


def main(argv: list[str] | None = None) -> int:
    """Runs ``guardpolicy`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code
    (0 clean, 1 findings, 2 usage or I/O error)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in PYTHON_TOOLS:
        from .tools.common.extras import MissingExtraError
        from .tools.common.interrupt import deliver_from_finalizers

        deliver_from_finalizers()

        try:
            module = importlib.import_module(f"guardpolicy.{PYTHON_TOOLS[args[0]]}")
        except MissingExtraError as e:  # one line, not a traceback: what to install
            print(f"guardpolicy {args[0]}: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C while torch imports: nothing started yet
            print(f"guardpolicy {args[0]}: interrupted while starting; nothing was done", file=sys.stderr)
            return 130
        try:
            return module.main(args[1:])
        except MissingExtraError as e:
            print(f"guardpolicy {args[0]}: {e}", file=sys.stderr)
            return 2
    data_dir = os.environ.get("GUARDPOLICY_DATA_DIR") or str(DATA_DIR)
    # File names are bytes to the C++ side, so names that are not UTF-8 still work.
    return _cli.run_cli([os.fsencode(a) for a in args], os.fsencode(data_dir))


if __name__ == "__main__":
    sys.exit(main())
