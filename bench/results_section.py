"""Writes one marked section of a results page, leaving the rest of the file as it is.

Each benchmark script that records its tables into bench/DETAILS.md owns the text between its
two markers there (``<!-- NAME: begin ... -->`` and ``<!-- NAME: end -->``); a file without
them gets the section appended. bench/RESULTS.md, the summary, is kept by hand except for its
marked ``zoo`` section at the end.
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
from pathlib import Path


def publish(text: str, results: Path | None, begin: str, end: str, title: str) -> None:
    """Prints ``text`` and, with ``results`` (DETAILS.md), writes it as its section there,
    under ``## title``."""
    print(text)
    if results:
        write_section(results, begin, end, f"{begin}\n## {title}\n\n{text}\n{end}\n")


def write_section(path: Path, begin: str, end: str, text: str) -> None:
    """Replaces the text from ``begin`` to ``end`` (both included) of ``path`` with
    ``text``, which starts with ``begin`` and ends with ``end`` and a newline; what follows
    the section (a blank line before the next one, say) stays as it was."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        tail = rest.split(end, 1)[1]
        new = head + text + (tail[1:] if text.endswith("\n") and tail.startswith("\n") else tail)
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


def counted_parser(doc: str, sweep: tuple[str, str], calls: int, instructions: int) -> argparse.ArgumentParser:
    """The arguments of a bench timed in one interleaved run and counted under callgrind:
    ``sweep`` (its option and default: ``("--layers", "2,36,82")``, a comma list), --calls
    (timed calls per variant), --block (calls per interleaved block), --instructions (calls
    per variant counted under callgrind; 0: none) and --results (DETAILS.md, to write its
    section there)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument(sweep[0], default=sweep[1])
    ap.add_argument("--calls", type=int, default=calls)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--instructions", type=int, default=instructions, help="calls counted under callgrind (0: none)")
    ap.add_argument("--results", type=Path)
    return ap


def count_cells(n: float | None, *bases: float | None) -> list[str]:
    """Table cells: the instructions per call ``n`` and its ratio to each of ``bases``
    (empty where a count is missing)."""
    return [f"{n:,.0f}" if n else "", *(f"{n / b:.3f}" if n and b else "" for b in bases)]


def recorded(machine: str, what: str, args: argparse.Namespace) -> str:
    """The line that opens a counted bench's section: the date, ``machine``, ``what`` was run,
    and the calls timed and counted (``counted_parser``'s arguments)."""
    counted = f"; instructions: {args.instructions} calls per variant under callgrind." if args.instructions else "."
    return (f"Recorded {datetime.date.today().isoformat()} on {machine}, {what}; {args.calls} timed calls per "
            f"variant, interleaved in blocks of {args.block}{counted}")


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


# --------------------------------------------------------------------------- rendering
# The pieces the per-call sections of DETAILS.md share (bench/README.md explains the words).
# A row of a per-call table is one of ``guardpolicy.tools.latency.summarize``'s dicts:
# variant, median_us, p90_us, block_mean_us, vs_no_filter, vs_torch_way (or None),
# minus_torch_way_us (or None), copy_spread (or None).

#: latency's short words for a recipe's parts, as the tables spell them out
_WORDS = ((" +ift", " + free tensors"), (" +stance", " + stance"))


def met(ok: bool) -> str:
    """The verdict's word: ``met`` or ``not met``."""
    return "met" if ok else "not met"


def label(variant: str) -> str:
    """A variant's label as the tables print it (``+ift`` spelled ``+ free tensors``)."""
    for short, long in _WORDS:
        variant = variant.replace(short, long)
    return variant


def recipe(variant: str) -> str:
    """What a verdict calls a ``gp.compile`` row: its label without ``(gp.compile)`` and
    without the recipe's parts in parentheses (``zero-guard floor``)."""
    name = label(variant).removesuffix(" (gp.compile)")
    return re.sub(r" \([^()]*\)$", "", name)


def md_row(cells: list[str], blank: str = " |") -> str:
    """One markdown table row; an empty cell is written ``blank``."""
    return "|" + "".join(f" {c} |" if c else blank for c in cells)


def md_head(header: list[str], left: int = 1) -> list[str]:
    """A table's header and alignment rows: the first ``left`` columns left, the rest right."""
    return [md_row(header), "|" + "---|" * left + "---:|" * (len(header) - left)]


def split_machine(machine: str, tail: int) -> tuple[str, str]:
    """``machine`` (comma-separated parts) as its head and its last ``tail`` parts, for an
    intro whose line breaks inside it: (``"AMD EPYC (x86_64), 2 CPUs, Python 3.11.7"``,
    ``"torch 2.13.0+cpu, 1 torch thread"``) for ``tail=2``; ``(machine, "")`` when it has
    no more parts than that."""
    parts = machine.split(", ")
    if len(parts) <= tail:
        return machine, ""
    return ", ".join(parts[:-tail]), ", ".join(parts[-tail:])


def pooled_from(copies: int) -> str:
    """`` (pooled from N builds of it)`` after "timed calls per variant", with more than one build."""
    return f" (pooled from {copies} builds of it)" if copies > 1 else ""


def spread_note(rows: list[dict]) -> str:
    """A table heading's note on how far the builds of one variant were apart (the largest
    ``copy_spread`` and the median variant's): the resolution of its ratios; empty with one build."""
    spreads = [r["copy_spread"] for r in rows if r["copy_spread"] is not None]
    if not spreads:
        return ""
    return (f" (builds of one variant up to {100 * max(spreads):.1f}% apart, "
            f"{100 * statistics.median(spreads):.1f}% in the median variant)")


def percall_header(twin: str | None = None) -> list[str]:
    """The columns of a per-call table: median, p90, ratio vs no filter and, with ``twin``,
    the ratio vs that baseline."""
    return (["variant", "median (µs/call)", "p90 (µs/call)", "ratio vs no filter (×)"]
            + ([f"ratio vs {twin} (×)"] if twin else []))


def percall_cells(r: dict, twin: bool) -> list[str]:
    """A row's cells under ``percall_header``: µs to 0.1, ratio vs no filter to 0.01, vs the twin to 0.001."""
    cells = [label(r["variant"]), f"{r['median_us']:.1f}", f"{r['p90_us']:.1f}", f"{r['vs_no_filter']:.2f}"]
    if twin:
        cells.append(f"{r['vs_torch_way']:.3f}" if r["vs_torch_way"] is not None else "")
    return cells


def percall_table(rows: list[dict], twin: str | None = None) -> list[str]:
    """A per-call table of ``rows``; with ``twin``, its ratio column (``vs_torch_way``)."""
    return [*md_head(percall_header(twin)), *(md_row(percall_cells(r, twin is not None)) for r in rows)]


def percall_tables(tables: dict[str, list[dict]], twin: str | None = None) -> list[str]:
    """Per ``"model, backend"`` of ``tables``: its bold heading with the builds' spread, then
    its per-call table, each followed by a blank line."""
    lines: list[str] = []
    for key, rows in tables.items():
        lines += [f"**{key}**{spread_note(rows)}", "", *percall_table(rows, twin), ""]
    return lines


def worst_twin_ratio(tables: dict[str, list[dict]]) -> tuple[str, str, float]:
    """(``"model, backend"``, variant, ratio) of the largest ``vs_torch_way`` in ``tables``."""
    return max(((key, r["variant"], r["vs_torch_way"]) for key, rows in tables.items()
                for r in rows if r["vs_torch_way"] is not None), key=lambda t: t[2])
