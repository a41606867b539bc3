"""``python -m guardpolicy recompiles --model FILE.py:build --run SCRIPT.py [-o fix.gpol]
[--json report.json]``: from a recompile storm to a proven fix in one command
(docs/recompiles.md).

Exit 0: a proven fix was written, or nothing stormed; 1: storms are left that no policy
line fixes (the report says what to do), or the fix was not proven; 2: usage or I/O error,
a model or script that does not load or raises; 130: Ctrl-C. Nothing but ``-o`` and
``--json`` is written; the user's model is built anew for each pass.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from ...api.files import refuse_bad_outputs, write_file
from ..common.model_spec import MODEL_HELP, ModelSpecError
from ..common.progress import for_terminal

PROG = "python -m guardpolicy recompiles"
#: The fix's ``verify every N calls`` unless told otherwise (as ``suggest``'s).
DEFAULT_VERIFY = 100


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run your loop compiled with watch_state, name every guard that failed recompile after "
                    "recompile, say what fixes each (drop, config, dynamic, tensor, structure, keep), write the fix "
                    "as a policy on top of watch_state and prove it by running the loop again against eager.")
    parser.add_argument("--model", required=True, metavar="MODEL", help=MODEL_HELP)
    parser.add_argument("--run", required=True, metavar="SCRIPT.py",
                        help="a script defining run(compiled, model): your loop, calling compiled as your program "
                             "does and changing model between calls as it does")
    parser.add_argument("-o", "--output", metavar="FIX.gpol", help="write the fix here (only when proven)")
    parser.add_argument("--force", action="store_true", help="replace FIX.gpol or the JSON if it exists")
    parser.add_argument("--json", metavar="OUT", help="also write the report as JSON (docs/cli.md)")
    parser.add_argument("--name", default="fix", help="the fix policy's name (default fix)")
    parser.add_argument("--backend", default="eager",
                        help="the compiles' backend (default eager: guards and recompiles do not depend on it)")
    parser.add_argument("--verify-every", type=int, default=DEFAULT_VERIFY, metavar="N",
                        help=f"the fix's `verify every N calls` when it drops a guard (default {DEFAULT_VERIFY}): "
                             "its drops re-checked on every N-th call, a value guard against an eager call")
    parser.add_argument("--no-verify", action="store_true", help="write no verify line")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for path in (args.output, args.json):
        if path and os.path.lexists(path) and not args.force:
            return _error(f"{path} exists; give --force to replace it")
    refuse_bad_outputs(parser, [args.output, args.json], [args.model, args.run])
    if args.output and args.json and os.path.abspath(args.output) == os.path.abspath(args.json):
        parser.error("-o and --json name the same file")
    for path in (args.output, args.json):
        folder = os.path.dirname(os.path.abspath(path)) if path else ""
        if folder and not os.path.isdir(folder):
            return _error(f"cannot write {path}: no folder {folder}")
    if args.verify_every < 1:
        parser.error("--verify-every must be at least 1")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.name) or args.name == "watch_state":
        parser.error(f"--name {args.name!r}: a policy name is an identifier other than watch_state")
    from ...api.errors import PolicyError
    from ..common import model_spec
    from .command import recompiles
    from .loop import LoopError, load_run
    from .render import table

    try:
        spec = model_spec.resolve(args.model)
        run = load_run(args.run)
    except ModelSpecError as e:
        return _error(f"--model: {e}")
    except LoopError as e:
        return _error(f"--run: {e}")
    progress = for_terminal("recompiles", args.quiet)
    try:
        report = recompiles(spec.build, run, name=args.name, backend=args.backend,
                            verify=None if args.no_verify else args.verify_every, progress=progress)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing was written", file=sys.stderr)
        return 130
    except (LoopError, ModelSpecError, PolicyError) as e:
        return _error(str(e))
    finally:
        if progress:
            progress.done()
    if args.output and report.proven:
        write_file(args.output, report.policy, inputs=[model_spec.split_spec(args.model)[0], args.run])
    if args.json:
        write_file(args.json, report.to_json() + "\n")
    print(table(report, args.output))
    if report.policy and not args.output and report.proven:
        print("the fix (give -o FIX.gpol to write it):\n" + report.policy)
    return 1 if report.unfixed or (report.policy and not report.proven) else 0
