"""``python -m guardpolicy demo`` (what ``make demo`` runs).

First the answer a user wants, per demo model (``guardpolicy.tools._models.DEMO_MODELS``: an MLP
with LayerNorm and a small random GPT-2) and backend (``inductor``, what users run, and
``eager``): per-call median and p90 of eager, ``torch.compile`` with no filter, the
recommended recipe through ``gp.compile`` (``--recommended``, default
``policies/examples/serving.gpol``) and the zero-guard floor, with ratios to no filter
(``guardpolicy.tools.latency``). Then the detailed table of ``python -m guardpolicy bench``
(eager backend: every standard policy and torch's own function, each also with
``install_free_tensors``; the stance; guards offered, kept and in the tree).

    python -m guardpolicy demo [--models mlp,gpt2] [--backends inductor,eager] [--recommended FILE]
                               [--calls 300] [--warmup 20] [--block 10] [--json OUT] [--plot PNG]

Exit status as ``bench``: 0 when every variant matches eager and every cross-check holds,
1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from .. import loading

from . import latency
from ..errors import PolicyError
from ._models import DEMO_MODELS, MODEL_NAMES
from .bench import machine_description  # noqa: F401 - re-exported (bench/bench_e2e.py uses it)
from .bench import main as bench_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy demo",
        description="Guards kept and per-call latency of the demo models under every filter "
                    "variant (python -m guardpolicy bench with the demo defaults).",
    )
    parser.add_argument("--calls", default="300", help="timed calls per variant (default 300)")
    parser.add_argument("--warmup", default="20", help="untimed warm-up calls per variant (default 20)")
    parser.add_argument("--block", default="10", help="consecutive calls per variant per round (default 10)")
    parser.add_argument("--models", default=",".join(DEMO_MODELS),
                        help=f"comma-separated, from {','.join(MODEL_NAMES)}")
    parser.add_argument("--backends", default="inductor,eager",
                        help="comma-separated backends of the headline table (default inductor,eager)")
    parser.add_argument("--recommended", default="policies/examples/serving.gpol", metavar="FILE",
                        help="the recipe of the headline table (default policies/examples/serving.gpol)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON to PATH")
    parser.add_argument("--plot", metavar="PNG", help="also write a bar chart to PNG (matplotlib)")
    parser.add_argument("--frontier", metavar="DIR",
                        help="end with the frontier: per model, latency against state changes caught, "
                             "a table and DIR/frontier_MODEL.png (guardpolicy.tools.frontier)")
    parser.add_argument("--frontier-backend", default="eager",
                        help="the backend of the frontier's audits and timing (default eager)")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODEL_NAMES]
    if not models or unknown:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(MODEL_NAMES)}")
    try:
        recommended = loading.load(args.recommended)
    except PolicyError as e:
        print(f"python -m guardpolicy demo: --recommended: {e}", file=sys.stderr)
        return 2
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    import torch

    torch.set_num_threads(1)  # as the detailed bench (its --threads default): per-call overhead shows
    print(latency.headline(recommended, models, backends, calls=int(args.calls), block=20,
                           progress=lambda msg: print(msg, file=sys.stderr, flush=True)), flush=True)
    print("Details (eager backend): every filter variant, guards and per-call latency\n", flush=True)
    bench_argv = ["--model", *models, "--calls", args.calls, "--warmup", args.warmup, "--block", args.block]
    if args.json:
        bench_argv += ["--json", args.json]
    if args.plot:
        bench_argv += ["--plot", args.plot]
    status = bench_main(bench_argv, prog="python -m guardpolicy demo")
    if args.frontier:
        show_frontier(models, args.frontier, args.frontier_backend, int(args.calls))
    return status


def show_frontier(models: list[str], out_dir: str, backend: str, calls: int) -> None:
    """Per model: the frontier table on stdout and ``out_dir/frontier_MODEL.png``."""
    import os

    from . import frontier
    from ._models import build
    from .._files import write_file

    print("\nThe frontier: per-call latency against the state changes each filter still catches\n", flush=True)
    for name in models:
        model, inputs = build(name)
        f = frontier.measure(name, model, inputs, backend=backend, calls=calls,
                             progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        print("\n".join(f.table()), flush=True)
        path = os.path.join(out_dir, f"frontier_{name}.png")
        write_file(path, frontier.plot(f))
        print(f"\nwrote {path}\n", flush=True)
    print(frontier.VERIFY_NOTE)


if __name__ == "__main__":
    sys.exit(main())
