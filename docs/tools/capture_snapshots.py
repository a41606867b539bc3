#!/usr/bin/env python3
"""Captures the snapshots the docs test checks names against (docs/snapshots/*.json.gz).

Usage: capture_snapshots.py [--check]   (run with the Python that has guardpolicy and torch
installed, e.g. .venv/bin/python; --check: exit 1 if a committed snapshot's names differ
from a fresh capture's)

The snapshots are those of the running build, torch release and Python version
(doc_names.snapshot_dir): torch 2.13 on Python 3.11 writes docs/snapshots/, which the docs
are checked against; another supported build (CI's legs: torch 2.11 on 3.12, torch 2.14 on
3.11, torch 2.15 on 3.13; the local leg of torch 2.12 on 3.12) writes docs/snapshots/<build>/
(e.g. torch2.11-py3.12), so that each build's check compares like with like.

One snapshot per model: the demo models (`mlp`, `gpt2`: guardpolicy.tools.common.models), the
audit model (`audit_mlp`: guardpolicy.tools.audit.build_audit_model), the model of the docs'
Python fragments (`fragment`: docs/tools/doc_checks.py PY_FRAGMENT_PRELUDE) and the models of
docs/tools/doc_models.py (`serving`, `config`, `nested`). Each is compiled once with
backend="eager" and a keep-everything recording filter (guardpolicy.tools.capture.capture).
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import doc_names  # noqa: E402


def builders() -> dict:
    """{snapshot name: builder() -> (fn, args)}."""
    import doc_models
    from doc_checks import PY_FRAGMENT_PRELUDE
    from guardpolicy.tools.common import models as _models
    from guardpolicy.tools import audit

    def fragment():
        scope: dict = {}
        exec(PY_FRAGMENT_PRELUDE, scope)  # noqa: S102 - the docs' own prelude
        return scope["model"], (scope["x"],)

    out = {name: (lambda name=name: _models.build(name)) for name in _models.DEMO_MODELS}
    out["audit_mlp"] = lambda: audit.build_audit_model("mlp")
    out["fragment"] = fragment
    out.update(doc_models.MODELS)
    return out


#: Names torch makes up per process: the n-th `__builtins_dict___<n>` a module's globals got
#: and `_<id(obj)>_c<n>` globals; a fresh capture may number them differently.
_PROCESS_NAMES = [(re.compile(r"__builtins_dict___\d+"), "__builtins_dict___N"),
                  (re.compile(r"_\d{6,}_c\d+"), "_ID_cN")]


def _stable(text: str) -> str:
    for pattern, repl in _PROCESS_NAMES:
        text = pattern.sub(repl, text)
    return text


def names_of(snapshot) -> list[tuple[str, str, str, str]]:
    """(name, guard_type, path, module_path) of every row, process-made numbers masked."""
    return sorted({(_stable(r["name"]), r["guard_type"], _stable(r.get("path", "")), _stable(r.get("module_path", "")))
                   for r in snapshot.rows()})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed snapshots")
    ns = parser.parse_args(argv)
    from guardpolicy.tools.capture import Snapshot, capture

    out = doc_names.snapshot_dir(doc_names.running_build())
    if not ns.check:
        out.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, build in builders().items():
        fn, args = build()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            snap = capture(fn, *args)
        path = out / f"{name}.json.gz"
        if ns.check:
            if not path.exists() or names_of(Snapshot.from_json(path)) != names_of(snap):
                stale.append(path)
            continue
        snap.to_json(path)
        print(f"{path.relative_to(ROOT)}: {snap.summary()}")
    if stale:
        print("stale (run docs/tools/capture_snapshots.py):", *[str(p.relative_to(ROOT)) for p in stale], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
