"""Writing or checking a generated docs file (shared by the gen_*.py scripts)."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(out: Path, text: str, argv: list[str], script: str) -> int:
    """Writes ``text`` to ``out``; with ``--check`` in ``argv`` writes nothing and returns 1
    (with a message naming ``script``) when ``out`` differs."""
    if "--check" in argv:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is stale: run {script}", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    return 0
