"""Every guard name and `path` the docs show is one torch really produces.

The names a policy compares (`name == "..."`, `path startswith "..."`, `name in {...}`,
`glob`, `matches`, ...) and the names of `test` rows (`name: "..."`, with the row's
`guard_type` when it gives one) in gpol text, and the `"name": "..."` / `"path": "..."`
items of Python dict literals (with their dict's `"guard_type"`), must each match at least
one guard of the snapshots in docs/snapshots/ (captured from real compiles by
docs/tools/capture_snapshots.py). A claim is checked by the policy engine itself: a probe
policy `drop when <field> <op> <literal>` must drop at least one snapshot row. Negations
(`!=`, `not in`) are checked as `==`: the name they exclude must exist too.

Used by docs/tools/docs_test.py (gpol and python blocks; not blocks annotated `expect`,
which show mistakes) and by tests/python/test_doc_names.py (the example and std policies).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The build (torch release and Python version) the docs' names are checked against: the
#: project's main target.
DOCS_BUILD = "torch2.13-py3.11"


def running_build() -> str:
    """This process's build, as `torch<major.minor>-py<major.minor>`."""
    import torch

    return f"torch{'.'.join(torch.__version__.split('.')[:2])}-py{sys.version_info.major}.{sys.version_info.minor}"


def snapshot_dir(build: str = DOCS_BUILD) -> Path:
    """Where the snapshots of `build` lie: docs/snapshots/ for the docs' build,
    docs/snapshots/<build>/ for another supported one. Guards differ by build: torch 2.14
    spells DUPLICATE_INPUT as CLASS_MATCH on GPT-2, and Python 3.12 and 3.13 compile other
    bytecode, so GPT-2's guards differ there too."""
    base = ROOT / "docs" / "snapshots"
    return base if build == DOCS_BUILD else base / build


SNAPSHOTS = snapshot_dir()

FIELDS = ("name", "path", "module_path")
_LIT = r'"(?:[^"\\\n]|\\.)*"'
_COMPARE = re.compile(
    r"\b(?P<field>module_path|path|name)\s+(?P<op>==|!=|startswith|endswith|contains|glob|matches|not\s+in|in)\s+"
    r"(?P<arg>" + _LIT + r"|\{[^{}]*\})")
_ROW = re.compile(r"\{(?P<body>[^{}]*)\}")
_ROW_ITEM = re.compile(r"(?P<field>[a-z_.]+)\s*:\s*(?P<lit>" + _LIT + ")")
_OPS = {"==": "==", "!=": "==", "in": "==", "not in": "=="}


@functools.cache
def snapshot_rows(build: str = DOCS_BUILD) -> tuple[dict, ...]:
    """Every row of every committed snapshot of `build`."""
    from guardpolicy.tools.capture import Snapshot

    where = snapshot_dir(build)
    paths = sorted(where.glob("*.json.gz"))
    if not paths:
        raise FileNotFoundError(f"no snapshots in {where} (run docs/tools/capture_snapshots.py)")
    return tuple(row for p in paths for row in Snapshot.from_json(p).rows())


def _gpol_literal(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gpol_claims(text: str) -> list[tuple[int, str]]:
    """(line, condition) per name claim of gpol text; line is 1-based within `text`."""
    out = []
    for m in _COMPARE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        op = re.sub(r"\s+", " ", m.group("op"))
        arg = m.group("arg")
        lits = re.findall(_LIT, arg) if arg.startswith("{") else [arg]
        for lit in lits:
            out.append((line, f"{m.group('field')} {_OPS.get(op, op)} {lit}"))
    for m in _ROW.finditer(text):
        items = {i.group("field"): i.group("lit") for i in _ROW_ITEM.finditer(m.group("body"))}
        names = [f for f in FIELDS if f in items]
        if not names:
            continue
        line = text.count("\n", 0, m.start()) + 1
        cond = " and ".join(f"{f} == {items[f]}" for f in names)
        if "guard_type" in items:
            cond += f" and guard_type == {items['guard_type'][1:-1]}"
        out.append((line, cond))
    return out


def python_claims(text: str) -> list[tuple[int, str]]:
    """(line, condition) per `"name"`/`"path"`/`"module_path"` item of a dict literal."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        items = {k.value: v.value for k, v in zip(node.keys, node.values)
                 if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
                 and isinstance(k.value, str) and isinstance(v.value, str)}
        names = [f for f in FIELDS if f in items]
        if not names:
            continue
        cond = " and ".join(f"{f} == {_gpol_literal(items[f])}" for f in names)
        if "guard_type" in items and re.fullmatch(r"[A-Z_]+", items["guard_type"]):
            cond += f" and guard_type == {items['guard_type']}"
        out.append((node.lineno, cond))
    return out


def unmatched(claims: list[tuple[int, str]], first_line: int = 1, build: str = DOCS_BUILD) -> list[str]:
    """The claims no snapshot row of `build` satisfies, as `line N: condition`, N counted
    from `first_line` (the line of the text's first line in its file); a probe that does not
    load is reported with its error."""
    import guardpolicy as gp

    rows = snapshot_rows(build)
    bad = []
    for line, cond in claims:
        line += first_line - 1
        try:
            probe = gp.load(f"guardpolicy 1\nunsafe policy probe {{\n  drop when {cond}\n  default keep\n}}\n")
            hits = sum(1 for keep in probe.evaluate(rows) if not keep)
        except Exception as e:  # noqa: BLE001 - reported as the claim's problem
            bad.append(f"line {line}: `{cond}`: {type(e).__name__}: {e}")
            continue
        if hits == 0:
            bad.append(f"line {line}: `{cond}` matches no guard torch produced "
                       f"({snapshot_dir(build).relative_to(ROOT)}/; docs/tools/capture_snapshots.py)")
    return bad
