#!/usr/bin/env python3
"""docs-test: checks every fenced code block of README.md and docs/*.md (``make docs-test``).

Usage: docs_test.py [-v] [-j N] [--keep] [FILE.md ...]
  (default files: README.md and docs/*.md; run it with the Python that has guardpolicy
  installed, e.g. .venv/bin/python; exit 0 when every block passes, 1 otherwise)

Three parts: doc_pages.py reads a page into its blocks and their annotations, doc_checks.py
checks one block per its language (PY_TIMEOUT, PY_FRAGMENT_PRELUDE, ``resolve_plugin`` are
there), and this script, the runner, prepares each page's working directory, runs its
blocks and reports.

Every fence needs a language. What each language means (the convention is also described in
docs/index.md, "Examples in these docs are tested"):

``gpol``     A whole policy file: it must lint with no diagnostic at all (warnings
             included; see ``expect``); a file without errors that declares ``test``
             blocks must also pass ``guardpolicy test``. A first line ``# file: NAME.gpol``
             saves the block as NAME.gpol in the page's working directory before any block
             of the page runs, so the page's commands and Python code can use it.
``python``   Run as a script (``python BLOCK.py``, a time limit of PY_TIMEOUT seconds) in the
             page's working directory; it must exit 0. Its output is not compared. Blocks
             that need torch import it (CPU torch; use ``backend="eager"``). A first line
             ``# file: NAME.py`` saves the block as NAME.py instead, as for gpol, for the
             page's commands to run (``torchrun ... NAME.py``); on its own it is only
             compiled (``py_compile``), not run.
``console``  Commands and their output: a line ``$ CMD`` is a command (a line ending in ``\\``
             continues on the next), the lines up to the next ``$`` are its expected output
             (stdout and stderr together). Lines are compared with trailing spaces removed;
             a line ``...`` matches any number of lines. A command that exits non-zero must be
             followed by ``$ echo $?`` showing its status (``$?`` is carried over). Commands
             run with bash in the page's working directory, with the venv's ``bin`` first on
             PATH (so ``guardpolicy`` and ``python`` are the installed ones).
``sh``, ``bash``, ``shell``
             Checked like ``console`` when they contain a ``$ `` line; otherwise a listing of
             commands that is shown, not run (``make demo``, a long benchmark).
``c``        A plugin (docs/plugins.md): compiled as C99 with warnings as errors against
             ``plugins/include`` into a shared library, which ``guardpolicy.load_plugin``
             must load in a fresh interpreter.
``text``, ``yaml``, ``json``, ``toml``, ``ini``, ``cpp``, ``cmake``, ``make``, ``diff``
             Not checked (program output, syntax summaries, other languages).

Guard names: in gpol blocks (not those annotated ``expect``, which show mistakes) every
string a rule compares with ``name``, ``path`` or ``module_path`` and every such value of a
``test`` row, and in python blocks every ``"name"``/``"path"``/``"module_path"`` item of a
dict literal, must match a guard torch 2.13 really produced: one of the snapshots in
docs/snapshots/ (docs/tools/doc_names.py; the snapshots are captured by
docs/tools/capture_snapshots.py from the models of docs/tools/doc_models.py, the demo
models, the audit model and the fragment prelude's model).

The page's working directory is a fresh temporary directory holding a copy of the repo's
``policies/`` (``policies/std/...``, ``policies/examples/...``), a ``.venv`` link to the
running Python's environment (so ``.venv/bin/guardpolicy`` works) and the page's
``# file:`` blocks. A page's blocks run in order; pages run in parallel.

An HTML comment on the line(s) directly above a fence annotates it (directives separated
by ``;``; an annotation not directly above a fence is an error):

``<!-- docs-test: skip REASON -->``
    Not checked; the reason (required; the rest of the comment) is printed in the report.
``<!-- docs-test: expect GP2001 GP3009 -->`` (gpol)
    An example of a mistake: the distinct codes its diagnostics carry must be exactly these.
``<!-- docs-test: fragment -->`` (gpol, python)
    Not a whole file. gpol: without the header it gets ``guardpolicy 1``; items (rules,
    ``default``, ``use``, ...) are wrapped in ``unsafe policy fragment { ... }``. A fragment
    must lint without errors (warnings are ignored: the wrapper is made up); with ``expect``,
    its errors must be among the codes listed and every code listed must occur. python: the
    block runs after PY_FRAGMENT_PRELUDE, which imports torch and defines ``model`` and ``x``.
``<!-- docs-test: load policy=NAME param.P=LITERAL ... -->`` (gpol)
    After a lint without errors, also ``guardpolicy.load`` the file with that policy name
    and those parameters (``true``, ``false``, integers, ``"strings"`` without spaces); its
    diagnostics (GP4xxx) count for ``expect``.
``<!-- docs-test: plugin=NAME -->`` (any block; repeatable)
    The block needs the plugin NAME, the shared library ``libgp_NAME.so`` of the installed
    package (``guardpolicy/plugins/``) or of ``build/plugins/`` (``resolve_plugin``). A gpol
    block is linted (and loaded) in a separate process after ``guardpolicy.load_plugin``;
    for the other blocks the library is copied into the page's working directory, so
    commands and code can name it ``libgp_NAME.so``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_checks import (C_LANGS, CONSOLE_LANGS, GPOL_LANGS, KNOWN_LANGS, PYTHON_LANGS, SHELL_LANGS,  # noqa: E402
                        Result, check_c, check_console, check_gpol, check_python, fail, resolve_plugin,
                        wrap_fragment)
from doc_pages import ROOT, Block, default_pages, parse_page  # noqa: E402


# --------------------------------------------------------------------------- the runner


def prepare_workdir(workdir: Path, blocks: list[Block]) -> list[Result]:
    """The page's working directory; failures for clashing ``# file:`` blocks."""
    (workdir / "_blocks").mkdir(parents=True)
    shutil.copytree(ROOT / "policies", workdir / "policies")
    (workdir / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    saved: dict[str, Block] = {}
    failures = []
    for b in blocks:
        if b.lang not in GPOL_LANGS | PYTHON_LANGS or "skip" in b.directives or not b.file_name:
            continue
        name = b.file_name
        if "fragment" in b.directives:
            failures.append(fail(b, f"a `# file: {name}` block is a whole file, not a fragment"))
            continue
        if "/" in name or name.startswith("."):
            failures.append(fail(b, f"`# file: {name}`: a plain file name, please"))
            continue
        if name in saved and saved[name].text != b.text:
            failures.append(fail(b, f"`# file: {name}` differs from the block at {saved[name].where}"))
            continue
        saved[name] = b
        (workdir / name).write_bytes(b.text.encode("utf-8"))
    return failures


def check_page(page: Path, blocks: list[Block], workdir: Path) -> list[Result]:
    results = prepare_workdir(workdir, blocks)
    failed = {id(r.block) for r in results}
    for index, b in enumerate(blocks):
        if id(b) in failed:
            continue
        if b.problems:
            results.append(fail(b, "bad annotation", b.problems))
            continue
        if not b.lang:
            results.append(fail(b, "fence without a language: tag it (gpol, python, console, sh, text, ...)"))
            continue
        if b.lang not in KNOWN_LANGS:
            results.append(fail(b, f"unknown language `{b.lang}` (known: {', '.join(sorted(KNOWN_LANGS))})"))
            continue
        misplaced = {"expect", "load"} & set(b.directives) if b.lang not in GPOL_LANGS else set()
        if "fragment" in b.directives and b.lang not in GPOL_LANGS | PYTHON_LANGS:
            misplaced.add("fragment")
        if misplaced:
            results.append(fail(b, f"`{'`, `'.join(sorted(misplaced))}` does not apply to {b.lang} blocks"))
            continue
        if "skip" in b.directives:
            results.append(Result(b, "SKIP", b.directives["skip"]))
            continue
        try:
            if b.lang not in GPOL_LANGS:
                for name in b.directives.get("plugin", "").split():
                    lib = resolve_plugin(name)
                    shutil.copyfile(lib, workdir / lib.name)
            if b.lang in GPOL_LANGS:
                if b.file_name:
                    path = workdir / b.file_name
                else:
                    path = workdir / "_blocks" / f"{page.stem}_L{b.line}.gpol"
                    text = wrap_fragment(b.text) if "fragment" in b.directives else b.text
                    path.write_bytes(text.encode("utf-8"))
                results.append(check_gpol(b, path, workdir))
            elif b.lang in PYTHON_LANGS:
                results.append(check_python(b, workdir, index))
            elif b.lang in CONSOLE_LANGS:
                results.append(check_console(b, workdir))
            elif b.lang in C_LANGS:
                results.append(check_c(b, workdir, index))
            elif b.lang in SHELL_LANGS:
                if any(ln.startswith("$ ") for ln in b.text.splitlines()):
                    results.append(check_console(b, workdir))
                else:
                    results.append(Result(b, "LIST", "no `$ ` prompt: a listing, not run"))
            else:
                results.append(Result(b, "----", "not checked"))
        except Exception as e:  # noqa: BLE001 - one block's crash is that block's failure
            results.append(fail(b, f"docs-test crashed: {type(e).__name__}: {e}"))
    return sorted(results, key=lambda r: r.block.line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check every fenced code block of the docs.")
    parser.add_argument("pages", nargs="*", type=Path, help="Markdown files (default: README.md docs/*.md)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list blocks that are not checked")
    parser.add_argument("-j", "--jobs", type=int, default=min(4, os.cpu_count() or 1), help="pages in parallel")
    parser.add_argument("--keep", action="store_true", help="keep the working directories (printed)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    pages = args.pages or default_pages()
    tmp = Path(tempfile.mkdtemp(prefix="gp-docs-test-"))
    parsed, problems = {}, []
    for page in pages:
        blocks, page_problems = parse_page(page)
        parsed[page] = blocks
        problems += page_problems
    all_results: list[Result] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(check_page, page, blocks, tmp / f"{n:02d}_{page.stem}"): page
                       for n, (page, blocks) in enumerate(parsed.items())}
            for page in pages:  # report in page order
                fut = next(f for f, p in futures.items() if p == page)
                for r in fut.result():
                    all_results.append(r)
                    if r.status in ("----", "LIST") and not args.verbose:
                        continue
                    print(f"{r.status}  {r.block.where}  {r.block.lang or '(none)'}  {r.note}".rstrip())
                    for d in r.details:
                        print(f"      {d}")
    finally:
        if args.keep:
            print(f"working directories kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print(f"FAIL  {p}")
    counts = {s: sum(r.status == s for r in all_results) for s in ("PASS", "FAIL", "SKIP", "LIST", "----")}
    failed = counts["FAIL"] + len(problems)
    print(f"docs-test: {counts['PASS']} passed, {failed} failed, {counts['SKIP']} skipped, "
          f"{counts['LIST'] + counts['----']} not run (listings, output, other languages) "
          f"in {len(pages)} pages, {time.monotonic() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
