"""``python -m guardpolicy demo`` (what ``make demo`` runs): one question answered, "what do I
do for my model?", for three demo models: an MLP with LayerNorm, a small random GPT-2, and a
HF Llama's greedy decode step on a ``StaticCache`` (``guardpolicy.tools.decode``).

Per model, on one backend (``inductor`` by default, what users run):

1. ``gp.suggest`` audits the model with every guard dropped and writes its suggested policy,
   with ``verify every 100 calls`` and ``dispatch direct`` (``--out DIR``: saved as
   ``DIR/suggested_MODEL.gpol``), the step after the one line: the audit's proof and its drops;
2. (both audits on ``--audit-backend``, eager by default: they recompile for every change)
   the mutation audit of torch's recipe (``skip_guard_on_all_nn_modules`` + free tensors +
   the ``skip_guard_eval_unsafe`` stance), of the safe setting in one line and of the suggested
   policy (with verify checking the first call, ``frontier.VERIFY_NOTE``): the state changes each still catches, of those
   that go stale with no guard at all, and of the changes ``torch.compile`` itself serves
   stale (``guardpolicy.tools.ignored_changes``: a hook added after warm-up, a patched
   ``forward``), which no filter catches;
3. one interleaved timing (``guardpolicy.tools.latency``): eager, ``torch.compile`` with no
   filter, torch's recipe the torch way (``latency.torch_way``), the safe setting in one line
   (``gp.compile(model, "watch_state")``: the recommendation, starred, as in the README) and the
   suggested policy through ``gp.compile``; for the Llama, each call is one step of a real decode loop and tokens/s is
   shown.

It prints a table per model, ``DIR/frontier_MODEL.png`` with ``--out`` (latency against
changes caught), and ends with how to get the same for your own model. The 30-variant table
of every standard policy is ``python -m guardpolicy bench``.

    python -m guardpolicy demo [--models mlp,gpt2,llama] [--backends inductor] [--calls 200]
                               [--block 20] [--out DIR] [--json OUT]

Exit status 0, 1 when a variant's output differs from eager's, 2 on bad arguments, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from ..runtime.logs import tool_objects
from .common.interrupt import interrupted
from .common.models import MODEL_NAMES

#: The models ``make demo`` answers for; ``llama`` is the decode step (``guardpolicy.tools.decode``).
DEMO = ("mlp", "gpt2", "llama")

TORCH_RECIPE = "torch's recipe (nn modules +ift +stance)"
ONE_LINE = 'guardpolicy: gp.compile(model, "watch_state")'
SUGGESTED = "guardpolicy: suggested + verify + direct dispatch"

#: Seconds each demo model takes on one backend with the default 200 calls, as measured by
#: ``make demo`` on the 2-core machine of bench/RESULTS.md (2026-12-03: 360 s in all), most of it
#: the mutation audits; printed before each model starts.
DEMO_SECONDS = {"mlp": 20, "gpt2": 170, "llama": 175}


def estimate(models: list[str], backends: list[str]) -> str:
    """The demo's opening line: how long it takes, per model, on the reference machine."""
    known = [m for m in models if m in DEMO_SECONDS]
    total = sum(DEMO_SECONDS[m] for m in known) * len(backends)
    per = ", ".join(f"{m} ~{DEMO_SECONDS[m]} s" for m in known)
    unknown = [m for m in models if m not in DEMO_SECONDS]
    return (f"demo: {len(models)} model(s) on {', '.join(backends)}: about {_minutes(total)} on a 2-core machine "
            f"({per}{'; no estimate for ' + ', '.join(unknown) if unknown else ''}), most of it the mutation "
            "audits")


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} minutes"


OWN_MODEL = """For your own model: gp.compile(model, "watch_state") in one line; for the audit's proof and its drops,
write my.py with a function that returns the model and its example inputs (docs/cli.md, `--model`), then
    python -m guardpolicy suggest --model my.py -o my.gpol
and compile with it: gp.compile(model, gp.load("my.gpol"))."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy demo",
        description="Per demo model: no filter, torch's recipe, guardpolicy's recommendation (the safe setting in "
                    "one line, gp.compile(model, \"watch_state\")) and the model's suggested policy (suggest + verify "
                    "+ direct dispatch): per-call latency, tokens/s and the state changes each catches.")
    parser.add_argument("--calls", default="200", help="timed calls per variant (default 200)")
    parser.add_argument("--block", default="20", help="consecutive calls per variant per round (default 20)")
    parser.add_argument("--models", default=",".join(DEMO),
                        help=f"comma-separated, from {','.join(MODEL_NAMES)} (llama: its decode step)")
    parser.add_argument("--backends", default="inductor", help="comma-separated (default inductor)")
    parser.add_argument("--audit-backend", default="eager",
                        help="the backend of suggest's and the mutation audits (default eager: they recompile for "
                             "every change, minutes per model on inductor; Dynamo's guards come before the backend)")
    parser.add_argument("--out", metavar="DIR",
                        help="write DIR/suggested_MODEL.gpol (the suggested policy) and DIR/frontier_MODEL.png")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON to PATH")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODEL_NAMES]
    if not models or unknown:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(MODEL_NAMES)}")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.out:
        try:
            os.makedirs(args.out, exist_ok=True)  # before the minutes of work, not after
        except OSError as e:
            parser.error(f"--out: cannot create {args.out}: {e.strerror or e}")
    try:
        calls, block = int(args.calls), int(args.block)
    except ValueError:
        parser.error("--calls and --block take whole numbers")
    try:
        with tool_objects():  # every object the demo compiles is its own: no recovery lines in their names
            return _run(args, models, backends, calls, min(block, calls))
    except KeyboardInterrupt:
        return interrupted("python -m guardpolicy demo", "the tables above are complete; no file half-written")


_PROGRESS = None


def _progress(msg: str) -> None:
    """A phase of the demo: a line on stderr (a bar on a terminal, ``tools/common/progress.py``)."""
    global _PROGRESS
    if _PROGRESS is None:
        from .common.progress import Progress

        _PROGRESS = Progress("demo", lines=True)
    _PROGRESS(msg)


def _run(args: argparse.Namespace, models: list[str], backends: list[str], calls: int, block: int) -> int:
    import torch

    from . import frontier, latency
    from ..api.files import write_file

    torch.set_num_threads(1)  # per-call overhead shows; one thread as a small serving process
    t0 = time.perf_counter()
    results = []
    print(estimate(models, backends) + "\n", flush=True)
    for name in models:
        for backend in backends:
            if name in DEMO_SECONDS:
                print(f"{name}, {backend}: starting, about {_minutes(DEMO_SECONDS[name])} on a 2-core machine",
                      flush=True)
            f, text, eager_us = answer(name, backend, calls, block, args.audit_backend)
            results.append(f)
            print("\n".join(table(f, eager_us)) + "\n", flush=True)
            if args.out:
                gpol = os.path.join(args.out, f"suggested_{name}.gpol")
                write_file(gpol, text)
                png = os.path.join(args.out, f"frontier_{name}.png" if len(backends) == 1
                                   else f"frontier_{name}_{backend}.png")
                write_file(png, frontier.plot(f, eager_us))
                print(f"wrote {gpol} (the suggested policy) and {png}\n", flush=True)
    if args.json:
        write_file(args.json, frontier.to_json(results) + "\n")
    print(f"Per-call latency: {latency.stamp(calls, block)}; the state changes from the mutation audits on the "
          f"{args.audit_backend} backend. Every variant's output equalled eager's before "
          f"timing, within {latency.TOLERANCE}. {frontier.VERIFY_NOTE} torch's recipe: "
          "skip_guard_on_all_nn_modules_unsafe, install_free_tensors around the compile, "
          "set_stance(skip_guard_eval_unsafe=True) around the timed calls; audited as the same policy.")
    print(f"\n(demo took {time.perf_counter() - t0:.0f} s; every standard policy and torch's own filters, "
          "30 variants: python -m guardpolicy bench)\n")
    print(OWN_MODEL)
    return 0


def table(f: Any, eager_us: float) -> list[str]:
    tokens = any(p.tokens_per_s for p in f.points)
    lines = [f"{f.model}, {f.backend}:", "",
             "| variant | median µs | p90 µs | / no filter |" + (" tokens/s |" if tokens else "")
             + " state changes caught | guards dropped |",
             "|---|---:|---:|---:|" + ("---:|" if tokens else "") + "---:|---:|",
             f"| eager | {eager_us:.1f} | | {eager_us / f.points[0].median_us:.2f} |"
             + (f" {f.eager_tokens_per_s:.0f} |" if tokens else "") + " (no compile) | |"]
    for p in f.points:
        name = f"**{p.name}** (recommended)" if p.recommended else p.name
        lines.append(f"| {name} | {p.median_us:.1f} | {p.p90_us:.1f} | {p.vs_no_filter:.2f} |"
                     + (f" {p.tokens_per_s:.0f} |" if tokens else "") + f" {p.caught} of {p.total} | {p.dropped} |")
    missed = [p for p in f.points if p.missed]
    for p in missed:
        shown = ", ".join(p.missed[:4]) + (f", and {len(p.missed) - 4} more" if len(p.missed) > 4 else "")
        lines.append(f"\n{p.name} misses: {shown}")
    return lines


def answer(name: str, backend: str, calls: int, block: int, audit_backend: str = "eager") -> tuple[Any, str, float]:
    """The frontier of ``name`` timed on ``backend`` (no filter, torch's recipe, ``watch_state``
    (recommended), the suggested policy; audited on ``audit_backend``), the suggested policy's
    text, and eager's median µs."""
    import torch

    from . import decode, latency, mutation
    from .frontier import NO_FILTER, Frontier, Point, dangerous_changes, missed_changes
    from ..api import loading
    from .suggest import suggest as suggest_policy
    from .common.models import build

    _progress(f"{name}, {backend}: suggest (auditing every guard, {audit_backend} backend)")
    if name == "llama":
        model = decode.build_model()
        args, kwargs = (), decode.Decoder(model, model).kwargs()
        label = "HF Llama decode step"
    else:
        model, args = build(name)
        kwargs, label = {}, name
    s = suggest_policy(model, tuple(args), kwargs, backend=audit_backend, name=f"suggested_{name}")
    text = decode.with_direct(s.source).render()
    counted = dangerous_changes(s.audit)
    recipe = latency.Recipe("torch's recipe", "skip_guard_on_all_nn_modules", ift=True, stance=True)
    audits = {}
    one_line = loading.load_std("watch_state")
    for what, policy, verify in ((TORCH_RECIPE, loading.load(recipe.policy_source()), None),
                                 (ONE_LINE, one_line, None), (SUGGESTED, loading.load(text), 1)):
        _progress(f"{name}, {backend}: auditing {what}")
        audits[what] = mutation.audit(model, args, kwargs, policy, label=name, backend=audit_backend, verify=verify)
    _progress(f"{name}, {backend}: compiling")
    torch.compiler.reset()
    eager_tokens = None
    try:
        with torch.no_grad():
            if name == "llama":
                vs = decode.variants(model, s.source, backend, without_direct=False, one_line=ONE_LINE)
                _progress(f"{name}, {backend}: timing")
                latency.run(vs, (), calls, block)
                rows = decode.rows(vs)
                eager_tokens = rows[0]["tokens_per_s"]
            else:
                vs = [latency.Variant("eager", latency.own_copy(model)), latency.no_filter(model, args, backend),
                      latency.torch_way(latency.own_class_copy(model), backend, recipe, args)]
                for what, policy in ((ONE_LINE, one_line), (SUGGESTED, loading.load(text))):
                    fn = latency.gp_compile(latency.own_copy(model), policy, backend=backend)
                    fn(*args)
                    vs.append(latency.Variant(what, fn))
                latency.check_outputs(vs, args)
                _progress(f"{name}, {backend}: timing")
                latency.run(vs, args, calls, block)
                rows = latency.summarize(vs)
    finally:
        torch.compiler.reset()
    _progress(f"{name}, {audit_backend}: changes torch itself serves stale (hooks, a patched forward)")
    ignored, ignored_missed = _ignored(name, model, args, recipe, text, audit_backend)
    eager, base, torch_row, one_line_row, ours = rows
    total = len(counted) + len(ignored)
    points = [Point(NO_FILTER, base["median_us"], base["p90_us"], 1.0, len(counted), total, 0, kind="torch",
                    missed=list(ignored), tokens_per_s=base.get("tokens_per_s"))]
    for what, row, kind in ((TORCH_RECIPE, torch_row, "torch"), (ONE_LINE, one_line_row, "guardpolicy"),
                            (SUGGESTED, ours, "guardpolicy")):
        missed = missed_changes(counted, audits[what]) + ignored_missed[what]
        points.append(Point(what, row["median_us"], row["p90_us"], row["vs_no_filter"], total - len(missed),
                            total, audits[what].dropped, missed, kind=kind,
                            tokens_per_s=row.get("tokens_per_s"), recommended=what == ONE_LINE))
    f = Frontier(label, backend if audit_backend == backend else f"{backend} (audited on {audit_backend})", points,
                 latency.stamp(calls, block))
    f.eager_tokens_per_s = eager_tokens
    return f, text, eager["median_us"]


def _ignored(name: str, model: Any, args: tuple, recipe: Any, text: str, backend: str) -> tuple[list, dict]:
    """``ignored_changes.outcomes`` for the demo's four settings on ``backend``: the changes
    ``torch.compile`` serves stale (a hook added after warm-up, a patched ``forward``), and per
    setting those it misses."""
    import torch

    from . import decode, ignored_changes, latency
    from ..api import loading
    from .common.compare import compare
    from .frontier import NO_FILTER
    from .common.models import output_tensor

    def torch_recipe(m: Any) -> Any:
        fn = torch.compile(m, backend=backend, options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
        return _Staged(fn, recipe)

    settings = {NO_FILTER: lambda m: torch.compile(m, backend=backend), TORCH_RECIPE: torch_recipe,
                ONE_LINE: lambda m: latency.gp_compile(m, loading.load_std("watch_state"), backend=backend),
                SUGGESTED: lambda m: latency.gp_compile(m, loading.load(text), backend=backend)}
    if name == "llama":
        loops: dict[int, Any] = {}

        def run(m: Any, fn: Any) -> Any:
            loop = loops.get(id(fn)) or loops.setdefault(id(fn), decode.Decoder(m, fn))
            return loop.logits(1)[0]
    else:
        def run(m: Any, fn: Any) -> Any:
            return output_tensor(fn(*args))
    try:
        return ignored_changes.outcomes(model, settings, run, lambda a, b: compare(a, b) is None)
    finally:
        torch.compiler.reset()


class _Staged:
    """torch's recipe as its users run it: compiled with ``install_free_tensors`` and called
    under the ``skip_guard_eval_unsafe`` stance once warm (``latency.stance_block``)."""

    def __init__(self, fn: Any, recipe: Any):
        self.fn, self.recipe, self.calls = fn, recipe, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from . import latency
        from ..runtime import torch_internals

        self.calls += 1
        if self.calls == 1:
            with torch_internals.config_patch(install_free_tensors=self.recipe.ift):
                return self.fn(*args, **kwargs)
        with latency.stance_block():
            return self.fn(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
