"""``python -m guardpolicy coverage``: before traffic, which of the calls a script lists would be
served by the cache entries warm-up compiled, and for the others which guard fails
(``guardpolicy.coverage``; docs/serving.md). Nothing of the listed calls runs.

    python -m guardpolicy coverage --model my_model.py:build --calls my_calls.py

``--model`` is the convention of ``suggest``: ``build()`` returns ``(model_or_fn,
example_args[, example_kwargs])``; a ``guardpolicy.compile`` result is used as it is, anything
else is compiled with ``--policy`` (default ``watch_state``) on ``--backend``. The script given
to ``--calls`` defines ``calls()``, returning a list of calls, each ``(args, kwargs)`` or a tuple
of positional arguments, and optionally ``warmup()``, the calls to run first, as a serving
warm-up would (default: the model's example call). Calls run and are checked with grad mode
off, as a serving loop runs them (``--grad``: on).

Exit 0 when every call is served, 1 when some call would compile, 2 on bad arguments, a bad
model or calls script, or an error while warming up.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common.model_spec import MODEL_HELP, ModelSpecError

_DYNAMIC = {"none": None, "true": True, "false": False}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy coverage",
        description="Check, before traffic, that warm-up compiled a cache entry for each call a script lists: "
                    "a table of the calls, the entry that serves each, or the guard that fails.")
    parser.add_argument("--model", required=True, metavar="MODEL", help=MODEL_HELP)
    parser.add_argument("--calls", required=True, metavar="SCRIPT.py",
                        help="a Python file defining calls() (a list of (args, kwargs) or argument tuples) and "
                             "optionally warmup() (the calls to run first; default: the model's example call)")
    parser.add_argument("--policy", default="watch_state",
                        help="the policy to compile the model with, unless build() returns a guardpolicy.compile "
                             "result (default watch_state)")
    parser.add_argument("--backend", default="inductor", help="the backend to compile with (default inductor)")
    parser.add_argument("--dynamic", choices=tuple(_DYNAMIC), default="none",
                        help="torch.compile's dynamic= (default none: torch's automatic dynamic shapes)")
    parser.add_argument("--grad", action="store_true", help="warm up and check with grad mode on (default off)")
    return parser


def _error(message: str) -> int:
    print(f"guardpolicy coverage: {message}", file=sys.stderr)
    return 2


def _calls_of(path: str) -> tuple[list, list | None]:
    """``(calls(), warmup() or None)`` of the script ``path``. Raises ModelSpecError."""
    from .common.model_spec import import_file

    module = import_file(path)
    lists = []
    for name, required in (("calls", True), ("warmup", False)):
        fn = getattr(module, name, None)
        if fn is None and not required:
            lists.append(None)
            continue
        if not callable(fn):
            raise ModelSpecError(f"{path}: defines no function `{name}()` returning a list of calls")
        try:
            found = fn()
        except Exception as e:  # noqa: BLE001 - the user's code: one line
            raise ModelSpecError(f"{path}: {name}() raised {type(e).__name__}: {e}") from None
        if not isinstance(found, (list, tuple)):
            raise ModelSpecError(f"{path}: {name}() returned a {type(found).__name__}, not a list of calls")
        lists.append(list(found))
    return lists[0], lists[1]


def _compiled(fn: Any, args: argparse.Namespace) -> Any:
    from ..runtime.compiled import compile as gp_compile, stats

    try:
        stats(fn)
        return fn
    except TypeError:
        pass
    return gp_compile(fn, args.policy, backend=args.backend, dynamic=_DYNAMIC[args.dynamic])


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when every call is served, 1 when some call would compile, 2 on a usage or
    input error."""
    args = _parser().parse_args(argv)
    import torch

    from .common import model_spec
    from ..api.errors import PolicyError
    from ..runtime.serving.coverage import coverage, split_call

    try:
        built = model_spec.resolve(args.model).build()
        calls, warmup = _calls_of(args.calls)
        compiled = _compiled(built.fn, args)
    except ModelSpecError as e:
        return _error(str(e))
    except (PolicyError, ValueError, TypeError, RuntimeError) as e:
        return _error(f"{type(e).__name__}: {e}")
    first = [(built.args, built.kwargs)] if warmup is None else warmup
    with torch.set_grad_enabled(args.grad):
        try:
            for i, call in enumerate(first):
                call_args, call_kwargs = split_call(call, i)
                compiled(*call_args, **call_kwargs)
        except Exception as e:  # noqa: BLE001 - the model's own error: one line
            return _error(f"warm-up call {i} raised {type(e).__name__}: {e}")
        try:
            table = coverage(compiled, calls)
        except (TypeError, RuntimeError) as e:
            return _error(str(e))
    print(table)
    return 0 if table.covered else 1


if __name__ == "__main__":
    sys.exit(main())
