"""The ``guardpolicy`` console script and ``python -m guardpolicy``.

``lint``, ``fmt``, ``test``, ``compile``, ``disasm`` and ``check`` run the C++ command line
inside this process; ``capture``, ``bench``, ``audit`` and ``demo`` are the Python tools
(they need torch). ``$GUARDPOLICY_DATA_DIR`` overrides the package's schema and std policies.
"""

from __future__ import annotations

import importlib
import os
import sys

from . import DATA_DIR, _core

#: Subcommands implemented in Python: name -> module with main(argv) -> int.
PYTHON_TOOLS = {"capture": "capture", "bench": "bench", "audit": "audit", "demo": "demo"}

#: One line per Python subcommand for the top-level ``--help`` (the C++ part lists its own).
PYTHON_TOOL_HELP = {
    "capture": "record the guards torch.compile offers while a script runs",
    "bench": "time eager, no filter, each policy and torch's filters on models",
    "audit": "change one piece of state at a time: recompiled, unaffected or stale",
    "demo": "bench on the two demo models (what `make demo` runs)",
}


def _top_level_help(args: list[str]) -> bool:
    """True when ``-h``/``--help`` comes before any subcommand (``--data-dir DIR`` may too)."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            return True
        if a == "--data-dir":
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return False  # a subcommand: its own help
    return False


def main(argv: list[str] | None = None) -> int:
    """Runs ``guardpolicy`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code
    (0 clean, 1 findings, 2 usage or I/O error)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in PYTHON_TOOLS:
        module = importlib.import_module(f"guardpolicy.{PYTHON_TOOLS[args[0]]}")
        return module.main(args[1:])
    data_dir = os.environ.get("GUARDPOLICY_DATA_DIR") or str(DATA_DIR)
    # File names are bytes to the C++ side, so names that are not UTF-8 still work.
    rc = _core.run_cli([os.fsencode(a) for a in args], os.fsencode(data_dir))
    if rc == 0 and _top_level_help(args):
        lines = ["Python subcommands (need torch; `guardpolicy SUBCOMMAND --help` for options):"]
        lines += [f"  {name:<28}{text}" for name, text in PYTHON_TOOL_HELP.items()]
        sys.stdout.write("\n".join(lines) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
