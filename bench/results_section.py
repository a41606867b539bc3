"""Writes one marked section of bench/RESULTS.md, leaving the rest of the file as it is.

Each benchmark script that records into RESULTS.md owns the text between its two markers
(``<!-- NAME: begin ... -->`` and ``<!-- NAME: end -->``); a file without them gets the
section appended.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def write_section(path: Path, begin: str, end: str, text: str) -> None:
    """Replaces the text from ``begin`` to ``end`` (both included) of ``path`` with
    ``text``, which starts with ``begin`` and ends with ``end``."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + text + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = old.rstrip("\n") + ("\n\n" if old else "") + text
    path.write_text(new, encoding="utf-8")


def run_parser(doc: str, *, calls: bool = True) -> argparse.ArgumentParser:
    """The arguments every per-call bench shares: --models, --backends (comma lists) and,
    with ``calls``, --calls (timed calls per variant) and --block (calls per interleaved block)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,gpt2")
    ap.add_argument("--backends", default="inductor,eager")
    if calls:
        ap.add_argument("--calls", type=int, default=400)
        ap.add_argument("--block", type=int, default=20)
    return ap


def check_blocks(ap: argparse.ArgumentParser, args: argparse.Namespace, every: int = 1) -> None:
    """``ap.error`` unless --block is a multiple of ``every`` (verify's sampling: each block
    then holds as many verified calls) and --calls of --block times --copies (each copy times
    whole blocks: no call asked for is dropped)."""
    copies = getattr(args, "copies", 1)
    if args.block % every or args.calls % (args.block * copies):
        ap.error((f"--block must be a multiple of {every}, and " if every > 1 else "")
                 + f"--calls a multiple of --block times --copies ({args.block} x {copies})")


def add_copies(ap: argparse.ArgumentParser) -> None:
    """--copies, for a bench that times through ``guardpolicy.tools.latency.measure``: the
    builds of each variant, pooled."""
    ap.add_argument("--copies", type=int, default=2,
                    help="builds of each variant, interleaved and pooled; --calls is split among them")
