"""``python -m guardpolicy bench``'s command line: the parser, the ``--model`` and
``--policy`` arguments, and ``main`` (one table per model on stdout, ``--json``/``--plot``
at the end); see ``guardpolicy.tools.bench`` (the module docstring)."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shlex
import sys
import time
from typing import Any, Callable

from ...api.errors import PolicyError
from ...api.files import refuse_bad_outputs, write_file
from ...api.loading import SAFE_POLICIES, load, load_policy
from ...api.policy import Policy
from ..common.compare import TOLERANCE
from ..common.interrupt import interrupted
from ..common.model_spec import MODEL_HELP
from ..common.models import DEMO_MODELS
from ..common.progress import Progress
from ..common.timing import machine_description
from .guards import code_owner, profile_fn, tree_api_available
from .output import LEGEND, format_table, row_json, write_plot
from .rows import make_rows
from .run import RunOptions, run_model, warmup_calls


def _positive(flag: str, minimum: int = 1) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} must be at least {minimum}")
        return value

    return parse


def build_parser(prog: str = "python -m guardpolicy bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Per-call guard overhead of a model compiled with no filter, with each --policy, with "
            "torch's six built-in filters (as std policies and as torch's own functions), each also "
            "with install_free_tensors, and with skip_guard_eval_unsafe after warm-up; measured in "
            "one interleaved run. The table goes to stdout, progress to stderr."),
    )
    parser.add_argument("--model", nargs="+", action="extend", metavar="MODEL",
                        help=f"{MODEL_HELP}; several allowed (default: {' '.join(DEMO_MODELS)})")
    parser.add_argument("--policy", nargs="+", action="extend", default=[], metavar="FILE[:NAME]",
                        help="policy files to measure too (FILE:NAME picks one policy of a file)")
    parser.add_argument("--calls", type=_positive("--calls"), default=300,
                        help="timed calls per variant (default 300)")
    parser.add_argument("--warmup", type=_positive("--warmup", 0), default=20,
                        help="untimed calls per variant after compiling (default 20, at least --stance-after)")
    parser.add_argument("--block", type=_positive("--block"), default=10,
                        help="consecutive timed calls per variant per round (default 10)")
    parser.add_argument("--stance-after", type=_positive("--stance-after"), default=10,
                        help="quiet calls before the stance variant switches to skip_guard_eval_unsafe (default 10)")
    parser.add_argument("--guard-iters", type=_positive("--guard-iters", 0), default=10,
                        help="profile_guard_manager samples per variant (each evicts the CPU caches "
                             "first, about 15 ms; 0 skips them; default 10)")
    parser.add_argument("--threads", type=_positive("--threads"), default=1,
                        help="torch intra-op threads while measuring (default 1: steadier on a busy machine)")
    parser.add_argument("--backend", choices=("eager", "inductor"), default="eager",
                        help="the backend of every compiled variant (default eager; inductor compiles "
                             "each variant, minutes per model)")
    parser.add_argument("--json", metavar="OUT", help="also write every number as JSON to OUT")
    parser.add_argument("--plot", metavar="OUT.png", help="also write a PNG bar chart to OUT.png (matplotlib)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return parser


def _load_policies(parser: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, Policy]]:
    out = []
    for spec in specs:
        path, name = spec, None
        if not os.path.exists(spec) and ":" in spec:
            path, name = spec.rsplit(":", 1)
        if not os.path.isfile(path) and path not in SAFE_POLICIES:
            parser.error(f"--policy: no such file: {path}")
        try:
            out.append((spec, load(path, policy=name) if name else load_policy(path)))
        except PolicyError as exc:
            parser.error(f"--policy {spec}:\n{exc}")
    return out


def _resolve_models(parser: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, Callable]]:
    """``(label, builder)`` per ``--model`` spec (``_model_spec``); ``builder()`` returns
    ``(model, positional inputs)``: keyword inputs are bound to positions where the model's
    signature allows it."""
    from ..common import model_spec as _model_spec

    out = []
    for spec in specs:
        try:
            resolved = _model_spec.resolve(spec)
        except _model_spec.ModelSpecError as exc:
            parser.error(f"--model {spec}: {exc}")
        out.append((resolved.label, lambda r=resolved: _positional(r.build())))
    labels = [label for label, _ in out]
    return [(label if labels.count(label) == 1 else f"{label} #{i + 1}", builder)
            for i, (label, builder) in enumerate(out)]


def _positional(built) -> tuple[Any, tuple]:
    """``(model, inputs)`` with ``built``'s keyword inputs bound to their positions."""
    if not built.kwargs:
        return built.fn, built.args
    fn = code_owner(built.fn)
    bound = inspect.signature(fn).bind(*((built.fn,) if fn is not built.fn else ()), *built.args, **built.kwargs)
    args, kwargs = bound.args, bound.kwargs
    if kwargs:
        raise ValueError(f"the bench passes inputs by position; {', '.join(kwargs)} can only be given by keyword")
    return built.fn, tuple(args[1:] if fn is not built.fn else args)


def main(argv: list[str] | None = None, prog: str = "python -m guardpolicy bench") -> int:
    """Runs the bench; returns 0 when every compiled variant matches eager and every
    cross-check holds, 1 otherwise, 2 on bad arguments, models or policy files, 130 on
    Ctrl-C (one line; ``--json`` and ``--plot`` are written whole at the end, or not at all)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    done: list[str] = []
    try:
        return _run(parser, args, argv, prog, done)
    except KeyboardInterrupt:
        measured = f"measured {', '.join(done)}" if done else "nothing measured"
        return interrupted(prog, f"{measured}; --json/--plot files are whole or not written")


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str], prog: str,
         done: list[str]) -> int:
    """``main``'s run; appends each model's label to ``done`` once its table is printed."""
    refuse_bad_outputs(parser, [args.json, args.plot], [*args.policy, *(args.model or [])])
    models = _resolve_models(parser, args.model or list(DEMO_MODELS))
    policies = _load_policies(parser, args.policy)

    t_start = time.perf_counter()
    import torch

    torch.set_num_threads(args.threads)
    opts = RunOptions(calls=args.calls, warmup=args.warmup, block=args.block,
                      guard_iters=args.guard_iters, stance_after=args.stance_after, backend=args.backend)
    progress = Progress("bench", enabled=not args.quiet, lines=True)
    tree_api = tree_api_available()
    machine = machine_description()
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "machine": machine,
        "torch_threads": torch.get_num_threads(),
        "command": " ".join([prog, *(shlex.quote(a) for a in argv)]),
        "date": time.strftime("%Y-%m-%d"),
        "calls": opts.calls,
        "backend": opts.backend,
        "warmup": {},
        "block": opts.block,
        "guard_iters": opts.guard_iters,
        "profile_guard_manager": profile_fn() is not None,
        "units": {"latency": "µs per call", "guard_eval": "µs per guard-tree check",
                  "counts": "guards, summed over compiled frames"},
        "tolerance": TOLERANCE,
        "models": {},
    }
    failed = False
    for i, (label, builder) in enumerate(models):
        try:
            model, inputs = builder()
        except ValueError as exc:  # ModelSpecError: says where
            print(f"{prog}: error: --model {label}: {exc}", file=sys.stderr)
            return 2
        rows = run_model(label, model, inputs, make_rows(policies, opts.stance_after), opts, progress, tree_api)
        report["warmup"][label] = warmup_calls(opts, rows)
        header = (
            f"== {label} | {opts.backend} backend | torch {torch.__version__} | {opts.calls} timed calls per variant "
            f"(interleaved, blocks of {opts.block}, {report['warmup'][label]} warm-up) | {machine}, "
            f"{torch.get_num_threads()} torch threads"
        )
        if i:
            print()
        print(format_table(rows, header))
        for v in rows:
            for p in v.problems:
                print(f"  ✗ {v.name}: {p}")
            if v.compiled and (not v.matches_eager or v.problems):
                failed = True
        report["models"][label] = [row_json(v) for v in rows]
        sys.stdout.flush()
        done.append(label)

    print()
    print(LEGEND)
    elapsed = time.perf_counter() - t_start
    report["wall_s"] = elapsed
    print(f"total {elapsed:.1f} s")
    if args.json:
        write_file(args.json, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        write_plot(args.plot, report)
        print(f"wrote {args.plot}")
    if failed:
        print("FAILED: a compiled variant differs from eager or a cross-check did not hold", file=sys.stderr)
        return 1
    return 0

