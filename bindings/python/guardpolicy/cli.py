"""The ``guardpolicy`` console script: runs the C++ command line inside this process."""

from __future__ import annotations

import sys

from . import DATA_DIR, _core


def main(argv: list[str] | None = None) -> int:
    """Runs ``guardpolicy`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code
    (0 clean, 1 findings, 2 usage or I/O error)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return _core.run_cli(args, str(DATA_DIR))


if __name__ == "__main__":
    sys.exit(main())
