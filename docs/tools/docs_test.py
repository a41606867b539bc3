#!/usr/bin/env python3
"""docs-test: checks every fenced code block of README.md and docs/*.md (``make docs-test``).

Usage: docs_test.py [-v] [-j N] [--keep] [FILE.md ...]
  (default files: README.md and docs/*.md; run it with the Python that has guardpolicy
  installed, e.g. .venv/bin/python; exit 0 when every block passes, 1 otherwise)

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
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_names  # noqa: E402

#: Languages and what happens to them.
GPOL_LANGS = {"gpol"}
PYTHON_LANGS = {"python", "py"}
CONSOLE_LANGS = {"console"}
SHELL_LANGS = {"sh", "bash", "shell"}
C_LANGS = {"c"}
NOT_CHECKED_LANGS = {"text", "yaml", "json", "toml", "ini", "cpp", "c++", "cmake", "make", "diff"}
KNOWN_LANGS = GPOL_LANGS | PYTHON_LANGS | CONSOLE_LANGS | SHELL_LANGS | C_LANGS | NOT_CHECKED_LANGS

DIRECTIVES = {"skip", "expect", "fragment", "load", "plugin"}

PY_TIMEOUT = 180  # seconds per python block
CMD_TIMEOUT = 120  # seconds per console command

#: What a python ``fragment`` block runs after: a small model and an input for it.
PY_FRAGMENT_PRELUDE = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.ReLU()).eval()
x = torch.randn(4, 8)
"""

_FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_FILE_LINE = re.compile(r"^#\s*file:\s*(?P<name>\S+)\s*$")
_CODE = re.compile(r"^GP\d{4}$")
_DECLARATION = re.compile(r"^\s*(?:unsafe\s+)?(?:policy|test)\b")
_TEST_DECL = re.compile(r"^\s*test\s+[A-Za-z_]\w*\s*\{", re.M)


# --------------------------------------------------------------------------- blocks


@dataclasses.dataclass
class Block:
    """One fenced code block of a Markdown page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str  # the content, each line ending in "\n"
    directives: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)  # bad annotations

    @property
    def where(self) -> str:
        try:
            rel = self.page.resolve().relative_to(ROOT)
        except ValueError:
            rel = self.page
        return f"{rel}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """NAME from a first line ``# file: NAME`` (gpol and python blocks)."""
        first = self.text.split("\n", 1)[0]
        m = _FILE_LINE.match(first)
        return m.group("name") if m else None

    @property
    def expected_codes(self) -> set[str]:
        return set(self.directives.get("expect", "").split())


def _parse_annotation(body: str, line: int) -> tuple[dict[str, str], list[str]]:
    directives: dict[str, str] = {}
    problems = []
    parts = [p.strip() for p in body.split(";")]
    for n, part in enumerate(parts):
        if part.split(" ", 1)[0] == "skip":  # the reason is the rest, `;` included
            parts[n:] = ["; ".join(parts[n:])]
            break
    for part in filter(None, parts):
        if part.startswith("plugin="):
            name, args = "plugin", part[len("plugin="):].strip()
        else:
            name, _, args = part.partition(" ")
            args = args.strip()
        if name not in DIRECTIVES:
            known = ", ".join(sorted(DIRECTIVES))
            problems.append(f"line {line}: unknown docs-test directive `{name}` (known: {known})")
            continue
        if name == "skip" and not args:
            problems.append(f"line {line}: `skip` needs a reason")
        if name == "expect" and (not args or not all(_CODE.match(c) for c in args.split())):
            problems.append(f"line {line}: `expect` takes diagnostic codes (GP1234 ...), not {args!r}")
        if name == "fragment" and args:
            problems.append(f"line {line}: `fragment` takes no argument")
        if name == "plugin" and not args:
            problems.append(f"line {line}: `plugin=NAME` needs a name")
        if name in directives and name != "plugin":
            problems.append(f"line {line}: `{name}` given twice")
        directives[name] = f"{directives[name]} {args}".strip() if name in directives else args
    return directives, problems


def parse_page(page: Path) -> tuple[list[Block], list[str]]:
    """The page's fenced blocks, and problems that belong to no block (stray annotations,
    an unclosed fence)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    page_problems: list[str] = []
    pending: list[tuple[int, str]] = []  # annotations waiting for their fence
    i = 0
    while i < len(lines):
        line = lines[i]
        m_ann = _ANNOTATION.match(line)
        if m_ann:
            pending.append((i + 1, m_ann.group("body")))
            i += 1
            continue
        if re.match(r"^\s*<!--.*docs-test", line):
            page_problems.append(f"{page}:{i + 1}: malformed annotation (write `<!-- docs-test: DIRECTIVE -->`)")
        m = _FENCE_OPEN.match(line)
        if not m:
            if pending:
                page_problems.append(f"{page}:{pending[0][0]}: docs-test annotation not directly above a fence")
                pending = []
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        info = m.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            text = lines[j]
            # CommonMark: the opening fence's indentation is removed from content lines.
            strip = min(indent, len(text) - len(text.lstrip(" ")))
            body.append(text[strip:])
            j += 1
        if j >= len(lines):
            page_problems.append(f"{page}:{i + 1}: fence never closed")
        block = Block(page=page, line=i + 1, lang=lang, text="".join(b + "\n" for b in body))
        for ann_line, ann_body in pending:
            directives, problems = _parse_annotation(ann_body, ann_line)
            for k, v in directives.items():
                block.directives[k] = f"{block.directives[k]} {v}".strip() if k in block.directives else v
            block.problems += problems
        pending = []
        blocks.append(block)
        i = j + 1
    if pending:
        page_problems.append(f"{page}:{pending[0][0]}: docs-test annotation not directly above a fence")
    return blocks, page_problems


def default_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class Result:
    block: Block
    status: str  # PASS, FAIL, SKIP, LIST (a shell listing, not run), "----" (not checked)
    note: str = ""
    details: list[str] = dataclasses.field(default_factory=list)


def _fail(block: Block, note: str, details: list[str] | None = None) -> Result:
    return Result(block, "FAIL", note, details or [])


# --------------------------------------------------------------------------- gpol


def wrap_fragment(text: str) -> str:
    """A gpol fragment as a whole file: the header, and items inside a made-up policy."""
    significant = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if significant and significant[0].split()[0] == "guardpolicy":
        return text
    if significant and _DECLARATION.match(significant[0]):
        return "guardpolicy 1\n\n" + text
    return "guardpolicy 1\n\nunsafe policy fragment {\n" + text + "}\n"


def _parse_literal(text: str):
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    raise ValueError(f"not a literal: {text!r} (true, false, an integer or a \"string\")")


def _load_args(spec: str) -> tuple[str, dict]:
    policy, params = "", {}
    for token in spec.split():
        key, sep, value = token.partition("=")
        if not sep:
            raise ValueError(f"`load` takes policy=NAME and param.P=LITERAL, not {token!r}")
        if key == "policy":
            policy = value
        elif key.startswith("param."):
            params[key[len("param."):]] = _parse_literal(value)
        else:
            raise ValueError(f"`load` takes policy=NAME and param.P=LITERAL, not {token!r}")
    return policy, params


def resolve_plugin(name: str) -> Path:
    """The shared library of the plugin NAME: ``libgp_NAME.so`` from the installed package
    (``guardpolicy/plugins/``) or the build tree (``build/plugins/``)."""
    candidates = []
    try:
        import guardpolicy

        candidates.append(Path(guardpolicy.__file__).resolve().parent / "plugins" / f"libgp_{name}.so")
    except ImportError:
        pass
    candidates.append(ROOT / "build" / "plugins" / f"libgp_{name}.so")
    for c in candidates:
        if c.is_file():
            return c
    raise RuntimeError(f"plugin={name}: none of {', '.join(map(str, candidates))} exists (make build)")


#: Lints (and loads) one file with plugins loaded, in a fresh process: a plugin stays loaded
#: for the life of the process, and the other blocks must not see it.
_PLUGIN_LINT = """\
import dataclasses, json, sys
import guardpolicy as gp
path, load, plugins = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
for p in plugins:
    gp.load_plugin(p)
diags = gp.lint(path)
if load is not None and not any(d.severity == "error" for d in diags):
    try:
        gp.load(path, policy=load[0] or None, **load[1])
    except gp.PolicyError as e:
        diags += e.diagnostics
print(json.dumps([dataclasses.asdict(d) for d in diags]))
"""


def diagnose(path: Path, load: tuple[str, dict] | None, plugins: list[str]) -> list:
    """Every diagnostic for ``path`` (guardpolicy.Diagnostic objects): ``lint``, then, with
    ``load`` = (policy, params) and no error, what ``guardpolicy.load`` reports."""
    import json

    import guardpolicy

    if plugins:
        libs = [str(resolve_plugin(p)) for p in plugins]
        proc = subprocess.run([sys.executable, "-c", _PLUGIN_LINT, str(path), json.dumps(load), *libs],
                              env=command_env(), capture_output=True, text=True, timeout=CMD_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"linting with plugins {libs} failed:\n{proc.stderr.strip()}")
        return [guardpolicy.Diagnostic(**d) for d in json.loads(proc.stdout)]
    diags = guardpolicy.lint(path)
    if load is not None and not any(d.severity == "error" for d in diags):
        try:
            guardpolicy.load(path, policy=load[0] or None, **load[1])
        except guardpolicy.PolicyError as e:
            diags = diags + e.diagnostics
    return diags


def check_gpol(block: Block, path: Path, workdir: Path) -> Result:
    fragment = "fragment" in block.directives
    expected = block.expected_codes
    plugins = block.directives.get("plugin", "").split()
    try:
        load = _load_args(block.directives["load"]) if "load" in block.directives else None
        diags = diagnose(path, load, plugins)
    except Exception as e:  # noqa: BLE001 - reported as the block's failure
        return _fail(block, f"{type(e).__name__}: {e}")
    codes = {d.code for d in diags}
    rendered = [line.replace(str(workdir) + os.sep, "")
                for d in diags for line in d.rendered.rstrip("\n").splitlines()]
    if fragment:
        errors = {d.code for d in diags if d.severity == "error"}
        missing, unexpected = expected - codes, errors - expected
        if missing or unexpected:
            note = "fragment: " + "; ".join(filter(None, [
                missing and f"expected {' '.join(sorted(missing))}, not reported",
                unexpected and f"unexpected errors {' '.join(sorted(unexpected))}"]))
            return _fail(block, note, rendered)
    elif codes != expected:
        want = " ".join(sorted(expected)) or "no diagnostic"
        got = " ".join(sorted(codes)) or "none"
        hint = "" if expected else " (an intended example? annotate it `<!-- docs-test: expect CODE -->`)"
        return _fail(block, f"expected {want}, got {got}{hint}", rendered)
    if not expected:
        bad = doc_names.unmatched(doc_names.gpol_claims(block.text), block.line + 1)
        if bad:
            return _fail(block, "names no compile produced", bad)
    note = f"{' '.join(sorted(expected))} as expected" if expected else "lints clean"
    if fragment:
        note = "fragment, " + ("no error" if not expected else note)
    if not fragment and not any(d.severity == "error" for d in diags) and _TEST_DECL.search(block.text):
        proc = subprocess.run([sys.executable, "-m", "guardpolicy", "test", str(path)], cwd=workdir,
                              env=command_env(), capture_output=True, text=True, timeout=CMD_TIMEOUT)
        if proc.returncode != 0:
            return _fail(block, f"`guardpolicy test` exited {proc.returncode}",
                         (proc.stdout + proc.stderr).rstrip("\n").splitlines())
        note += ", its tests pass"
    return Result(block, "PASS", note)


# --------------------------------------------------------------------------- commands


def command_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("GUARDPOLICY_DATA_DIR", None)  # the installed package's data, as the docs say
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@dataclasses.dataclass
class Command:
    line: int  # 1-based line in the page
    cmd: str
    expected: list[str]


def parse_console(block: Block) -> tuple[list[Command], list[str]]:
    commands: list[Command] = []
    problems = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ ") or line == "$":
            cmd, start = line[2:], i
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd + "\n" + lines[i]  # bash reads backslash-newline as a continuation
            commands.append(Command(block.line + 1 + start, cmd, []))
        elif commands:
            commands[-1].expected.append(line)
        elif line.strip():
            problems.append(f"line {block.line + 1 + i}: output before the first `$ ` command")
        i += 1
    return commands, problems


def _norm(lines: list[str]) -> list[str]:
    out = [ln.rstrip() for ln in lines]
    while out and not out[-1]:
        out.pop()
    return out


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """``expected`` equals ``actual``, where a line ``...`` stands for any number of lines."""
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[i, j]
        if i == len(expected):
            r = j == len(actual)
        elif expected[i].strip() == "...":
            r = match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        else:
            r = j < len(actual) and expected[i] == actual[j] and match(i + 1, j + 1)
        memo[i, j] = r
        return r

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * (len(expected) + len(actual)) + 100))
    return match(0, 0)


def check_console(block: Block, workdir: Path) -> Result:
    commands, problems = parse_console(block)
    if problems:
        return _fail(block, "bad console block", problems)
    if not commands:
        return _fail(block, "no `$ ` command in a console block")
    env = command_env()
    prev_rc = 0
    for n, c in enumerate(commands):
        try:
            proc = subprocess.run(["bash", "-c", f"(exit {prev_rc}); {c.cmd}"], cwd=workdir, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=CMD_TIMEOUT)
        except subprocess.TimeoutExpired:
            return _fail(block, f"line {c.line}: `{c.cmd}` ran past {CMD_TIMEOUT} s")
        out = proc.stdout.decode("utf-8", "replace").replace(str(workdir) + os.sep, "")
        actual, expected = _norm(out.splitlines()), _norm(c.expected)
        if not output_matches(expected, actual):
            details = ["expected:", *(f"  | {ln}" for ln in expected), "got:", *(f"  | {ln}" for ln in actual)]
            return _fail(block, f"line {c.line}: output of `{c.cmd}` differs", details)
        nxt = commands[n + 1].cmd.strip() if n + 1 < len(commands) else ""
        if proc.returncode != 0 and nxt != "echo $?":
            return _fail(block, f"line {c.line}: `{c.cmd}` exited {proc.returncode}; "
                                "if that is intended, show it with `$ echo $?` after it",
                         actual[-20:])
        prev_rc = proc.returncode
    return Result(block, "PASS", f"{len(commands)} command{'s' if len(commands) != 1 else ''}")


# --------------------------------------------------------------------------- python


def check_python(block: Block, workdir: Path, index: int) -> Result:
    if block.file_name:  # saved by prepare_workdir, for the page's commands
        return check_python_file(block, workdir / block.file_name)
    code = block.text
    bad = doc_names.unmatched(doc_names.python_claims(code), block.line + 1)
    if bad:
        return _fail(block, "names no compile produced", bad)
    if "fragment" in block.directives:
        code = PY_FRAGMENT_PRELUDE + "\n" + code
    script = workdir / "_blocks" / f"{block.page.stem}_L{block.line}_{index}.py"
    script.write_text(code, encoding="utf-8")
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=workdir, env=command_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PY_TIMEOUT)
    except subprocess.TimeoutExpired:
        return _fail(block, f"ran past {PY_TIMEOUT} s")
    took = time.monotonic() - start
    if proc.returncode != 0:
        out = proc.stdout.decode("utf-8", "replace").rstrip("\n").splitlines()
        return _fail(block, f"exited {proc.returncode}", out[-30:])
    fragment = " (fragment)" if "fragment" in block.directives else ""
    return Result(block, "PASS", f"ran in {took:.1f} s{fragment}")


def check_python_file(block: Block, path: Path) -> Result:
    """A ``# file: NAME.py`` block: it must compile; the page's commands run it."""
    proc = subprocess.run([sys.executable, "-m", "py_compile", str(path)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=PY_TIMEOUT)
    if proc.returncode != 0:
        return _fail(block, "does not compile", proc.stdout.decode("utf-8", "replace").splitlines()[-10:])
    return Result(block, "PASS", f"saved as {path.name} for the page's commands (compiles)")


# --------------------------------------------------------------------------- c


C_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden"]
LOAD_PLUGIN = """
import sys, guardpolicy as gp
info = gp.load_plugin(sys.argv[1])
print(info.name, len(info.fields), len(info.functions), len(info.filters))
"""


def check_c(block: Block, workdir: Path, index: int) -> Result:
    """A plugin in C: it must compile warning-free as C99 against plugins/include, and the
    shared library must load with guardpolicy.load_plugin (in a fresh interpreter)."""
    source = workdir / "_blocks" / f"{block.page.stem}_L{block.line}_{index}.c"
    source.write_text(block.text, encoding="utf-8")
    library = source.with_suffix(".so")
    cc = os.environ.get("CC", "cc")
    proc = subprocess.run([cc, *C_FLAGS, "-I", str(ROOT / "plugins" / "include"), str(source), "-o", str(library)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PY_TIMEOUT)
    if proc.returncode != 0:
        return _fail(block, f"{cc} failed", proc.stdout.decode("utf-8", "replace").splitlines()[-30:])
    proc = subprocess.run([sys.executable, "-c", LOAD_PLUGIN, str(library)], cwd=workdir, env=command_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PY_TIMEOUT)
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        return _fail(block, "the plugin does not load", out.splitlines()[-30:])
    name, fields, functions, filters = out.split()[-4:]
    return Result(block, "PASS", f"plugin `{name}` compiles and loads: {fields} fields, {functions} functions, "
                                 f"{filters} filters")


# --------------------------------------------------------------------------- pages


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
            failures.append(_fail(b, f"a `# file: {name}` block is a whole file, not a fragment"))
            continue
        if "/" in name or name.startswith("."):
            failures.append(_fail(b, f"`# file: {name}`: a plain file name, please"))
            continue
        if name in saved and saved[name].text != b.text:
            failures.append(_fail(b, f"`# file: {name}` differs from the block at {saved[name].where}"))
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
            results.append(_fail(b, "bad annotation", b.problems))
            continue
        if not b.lang:
            results.append(_fail(b, "fence without a language: tag it (gpol, python, console, sh, text, ...)"))
            continue
        if b.lang not in KNOWN_LANGS:
            results.append(_fail(b, f"unknown language `{b.lang}` (known: {', '.join(sorted(KNOWN_LANGS))})"))
            continue
        misplaced = {"expect", "load"} & set(b.directives) if b.lang not in GPOL_LANGS else set()
        if "fragment" in b.directives and b.lang not in GPOL_LANGS | PYTHON_LANGS:
            misplaced.add("fragment")
        if misplaced:
            results.append(_fail(b, f"`{'`, `'.join(sorted(misplaced))}` does not apply to {b.lang} blocks"))
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
            results.append(_fail(b, f"docs-test crashed: {type(e).__name__}: {e}"))
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
