"""The per-language checks of the docs test (docs_test.py): each runs one block of a page in
the page's working directory and gives its ``Result``. gpol blocks lint (and load, and run
their ``test`` blocks), console blocks run their commands and compare the output, python
blocks run as scripts, c blocks compile and load as plugins. docs_test.py's docstring
describes the conventions."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import doc_names
from doc_pages import ROOT, Block

#: Languages and what happens to them.
GPOL_LANGS = {"gpol"}
PYTHON_LANGS = {"python", "py"}
CONSOLE_LANGS = {"console"}
SHELL_LANGS = {"sh", "bash", "shell"}
C_LANGS = {"c"}
NOT_CHECKED_LANGS = {"text", "yaml", "json", "toml", "ini", "cpp", "c++", "cmake", "make", "diff"}
KNOWN_LANGS = GPOL_LANGS | PYTHON_LANGS | CONSOLE_LANGS | SHELL_LANGS | C_LANGS | NOT_CHECKED_LANGS

PY_TIMEOUT = 180  # seconds per python block
CMD_TIMEOUT = 120  # seconds per console command

#: What a python ``fragment`` block runs after: a small model and an input for it.
PY_FRAGMENT_PRELUDE = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.ReLU()).eval()
x = torch.randn(4, 8)
"""

_DECLARATION = re.compile(r"^\s*(?:unsafe\s+)?(?:policy|test)\b")
_TEST_DECL = re.compile(r"^\s*test\s+[A-Za-z_]\w*\s*\{", re.M)


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class Result:
    block: Block
    status: str  # PASS, FAIL, SKIP, LIST (a shell listing, not run), "----" (not checked)
    note: str = ""
    details: list[str] = dataclasses.field(default_factory=list)


def fail(block: Block, note: str, details: list[str] | None = None) -> Result:
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
        return fail(block, f"{type(e).__name__}: {e}")
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
            return fail(block, note, rendered)
    elif codes != expected:
        want = " ".join(sorted(expected)) or "no diagnostic"
        got = " ".join(sorted(codes)) or "none"
        hint = "" if expected else " (an intended example? annotate it `<!-- docs-test: expect CODE -->`)"
        return fail(block, f"expected {want}, got {got}{hint}", rendered)
    if not expected:
        bad = doc_names.unmatched(doc_names.gpol_claims(block.text), block.line + 1)
        if bad:
            return fail(block, "names no compile produced", bad)
    note = f"{' '.join(sorted(expected))} as expected" if expected else "lints clean"
    if fragment:
        note = "fragment, " + ("no error" if not expected else note)
    if not fragment and not any(d.severity == "error" for d in diags) and _TEST_DECL.search(block.text):
        proc = subprocess.run([sys.executable, "-m", "guardpolicy", "test", str(path)], cwd=workdir,
                              env=command_env(), capture_output=True, text=True, timeout=CMD_TIMEOUT)
        if proc.returncode != 0:
            return fail(block, f"`guardpolicy test` exited {proc.returncode}",
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
        return fail(block, "bad console block", problems)
    if not commands:
        return fail(block, "no `$ ` command in a console block")
    env = command_env()
    prev_rc = 0
    for n, c in enumerate(commands):
        try:
            proc = subprocess.run(["bash", "-c", f"(exit {prev_rc}); {c.cmd}"], cwd=workdir, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=CMD_TIMEOUT)
        except subprocess.TimeoutExpired:
            return fail(block, f"line {c.line}: `{c.cmd}` ran past {CMD_TIMEOUT} s")
        out = proc.stdout.decode("utf-8", "replace").replace(str(workdir) + os.sep, "")
        actual, expected = _norm(out.splitlines()), _norm(c.expected)
        if not output_matches(expected, actual):
            details = ["expected:", *(f"  | {ln}" for ln in expected), "got:", *(f"  | {ln}" for ln in actual)]
            return fail(block, f"line {c.line}: output of `{c.cmd}` differs", details)
        nxt = commands[n + 1].cmd.strip() if n + 1 < len(commands) else ""
        if proc.returncode != 0 and nxt != "echo $?":
            return fail(block, f"line {c.line}: `{c.cmd}` exited {proc.returncode}; "
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
        return fail(block, "names no compile produced", bad)
    if "fragment" in block.directives:
        code = PY_FRAGMENT_PRELUDE + "\n" + code
    script = workdir / "_blocks" / f"{block.page.stem}_L{block.line}_{index}.py"
    script.write_text(code, encoding="utf-8")
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=workdir, env=command_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PY_TIMEOUT)
    except subprocess.TimeoutExpired:
        return fail(block, f"ran past {PY_TIMEOUT} s")
    took = time.monotonic() - start
    if proc.returncode != 0:
        out = proc.stdout.decode("utf-8", "replace").rstrip("\n").splitlines()
        return fail(block, f"exited {proc.returncode}", out[-30:])
    fragment = " (fragment)" if "fragment" in block.directives else ""
    return Result(block, "PASS", f"ran in {took:.1f} s{fragment}")


def check_python_file(block: Block, path: Path) -> Result:
    """A ``# file: NAME.py`` block: it must compile; the page's commands run it."""
    proc = subprocess.run([sys.executable, "-m", "py_compile", str(path)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=PY_TIMEOUT)
    if proc.returncode != 0:
        return fail(block, "does not compile", proc.stdout.decode("utf-8", "replace").splitlines()[-10:])
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
        return fail(block, f"{cc} failed", proc.stdout.decode("utf-8", "replace").splitlines()[-30:])
    proc = subprocess.run([sys.executable, "-c", LOAD_PLUGIN, str(library)], cwd=workdir, env=command_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PY_TIMEOUT)
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        return fail(block, "the plugin does not load", out.splitlines()[-30:])
    name, fields, functions, filters = out.split()[-4:]
    return Result(block, "PASS", f"plugin `{name}` compiles and loads: {fields} fields, {functions} functions, "
                                 f"{filters} filters")
