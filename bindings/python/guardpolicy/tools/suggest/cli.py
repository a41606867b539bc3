"""``python -m guardpolicy suggest``: the command line (``main``) and what it prints
(``report``); ``command.suggest`` does the work."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict

from ...api.files import refuse_bad_outputs, write_file
from ..common.model_spec import MODEL_HELP, ModelSpecError
from ..common.progress import for_terminal
from ..common.timing.machine import peak_rss_mib
from . import from_run as _from_run
from .command import DEFAULT_VERIFY, KEPT_HARMLESS, NothingToAudit, Suggestion, identifier, offered, suggest


def state_name(group) -> str:
    """A kept state as the report names it: its guard name, or for ambient state (no value:
    grad mode, global state) its guard types."""
    return group.name or "/".join(sorted({x.guard_type for x in group.guards}))


def _states(n: int) -> str:
    return f"{n} state" if n == 1 else f"{n} states"


def not_mutated(s: Suggestion) -> dict[str, list[str]]:
    """The kept states no change could be made for, by reason (the first of each state)."""
    out: dict[str, list[str]] = defaultdict(list)
    for g in s.kept.get("not mutated", []):
        why = (g.reasons or [t.detail for t in g.trials] or ["no change known"])[0]
        why = re.sub(r" \([A-Za-z_][A-Za-z0-9_.]*\)", "", why)  # "a class (int)" and "a class (str)" alike
        out[why].append(state_name(g))
    return dict(out)


def report(s: Suggestion, out_path: str) -> str:
    """What ``suggest`` prints: the audit counts, the gain per backend (one torch thread),
    what stays protected, and what the audit could not change (kept)."""
    counts = s.audit.guard_counts()
    lines = [f"wrote {out_path}: policy {s.name} drops {len(s.dropped)} of {s.audit.offered} guards "
             f"(audit on the {s.audit.backend} backend: " + ", ".join(f"{o} {n}" for o, n in counts.items()) +
             f"; compile {s.audit.compile_s:.1f} s, mutations {s.audit.audit_s:.1f} s)",
             f"  {s.audit.planned} changes planned, {s.audit.recompiles + 1} compiles; peak memory "
             f"{peak_rss_mib():.0f} MiB (this process's maximum resident set)" + (
                 f"; --budget spent: {s.audit.budget_cut} changes not tried, their states kept"
                 if s.audit.budget_cut else ""),
             ("  nothing dropped: no verify line" if not s.dropped else
              f"  verify every {s.verify} calls: the dropped guards are re-checked" if s.verify is not None else
              "  --no-verify: nothing re-checks the dropped guards (the policy's doc says so)")]
    for backend in s.bench:
        failed = [r["error"] for r in s.bench[backend] if r.get("variant") == "error"]
        if failed:
            lines.append(f"  per call, {backend}: not timed: repeated calls raised {failed[0]} (a model whose calls "
                         "keep state, e.g. a KV cache filling up, is timed by bench/bench_llama_suggest.py's way)")
            continue
        gain = s.gain(backend)
        if gain:
            base, mine = gain
            lines.append(f"  per call, {backend}, one torch thread: no filter {base:.1f} µs -> {s.name} "
                         f"{mine:.1f} µs "
                         f"({mine / base:.2f}x)")
    lines.append("  stays protected (pieces of state, each with its guards):")
    for outcome in ("dangerous", "caught", "not mutated", KEPT_HARMLESS):
        groups = s.kept.get(outcome, [])
        if groups:
            names = list(dict.fromkeys(state_name(g) for g in groups))
            shown = ", ".join(names[:6]) + (f", … {len(names) - 6} more" if len(names) > 6 else "")
            lines.append(f"    {outcome} ({_states(len(groups))}): {shown}")
    if s.from_run:
        names = list(dict.fromkeys(n for n, _ in s.from_run))
        count = f"{len(s.from_run)} guard" + ("s" if len(s.from_run) != 1 else "")
        lines.append(f"  dropped though they failed in your run ({count}; harmless on every value "
                     f"the run gave them, output and written state): " + ", ".join(names[:6])
                     + (f", … {len(names) - 6} more" if len(names) > 6 else ""))
    missing = not_mutated(s)
    if missing:
        lines.append(f"  could not mutate (kept, {sum(len(v) for v in missing.values())} states):")
        for why, names in missing.items():
            shown = ", ".join(names[:4]) + (f", … {len(names) - 4} more" if len(names) > 4 else "")
            lines.append(f"    {why} ({len(names)}): {shown}")
    return "\n".join(lines)


def _error(message: str) -> int:
    """A problem with what the arguments name (not their form): one line, exit 2."""
    print(f"python -m guardpolicy suggest: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the policy was written; 1 when the model's calls do not repeat or the audit
    left the model changed; 2 on bad arguments, a bad model, an existing output without
    --force, or a policy that failed its own checks; 130 on Ctrl-C (the model restored)."""
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy suggest",
        description="Mutation-audit a model's guards (each one's state changed to boundary values the way it "
                    "would notice), write a policy that drops only the guards harmless on every value tried, "
                    "with verify re-checking them, and measure the per-call gain with one torch thread.")
    parser.add_argument("--model", required=True, metavar="MODEL", help=MODEL_HELP)
    parser.add_argument("-o", "--output", required=True, metavar="OUT.gpol", help="the policy file to write")
    parser.add_argument("--force", action="store_true", help="replace OUT.gpol if it exists")
    parser.add_argument("--name", help="the policy's name (default: from the model)")
    parser.add_argument("--backend", default="inductor",
                        help="the audit's backend (default inductor, what users run; eager is faster to compile "
                             "but runs real ops on any input, so tensor guards are then always kept)")
    parser.add_argument("--bench-backends", default="inductor,eager",
                        help="comma-separated backends to time no filter against the policy on, one torch thread "
                             "(default inductor,eager; empty: no timing)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per variant (default 200)")
    parser.add_argument("--verify-every", type=int, default=DEFAULT_VERIFY, metavar="N",
                        help=f"the policy's `verify every N calls` (default {DEFAULT_VERIFY})")
    parser.add_argument("--no-verify", action="store_true",
                        help="write no verify line (the policy's doc then warns that nothing re-checks the drops)")
    parser.add_argument("--from-run", metavar="SCRIPT.py|REPORT.json",
                        help="a script defining run(compiled, model): your own workload, run under the suggested "
                             "policy in dry-run; or a dry-run report your program wrote (gp.compile(..., "
                             "dry_run=PATH)); a guard that failed during the run is dropped only where the audit "
                             "proved it harmless on the values the script's calls gave it (a report gives no values: "
                             "kept)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="stop trying changes after this many seconds (compile included); every state not "
                             "finished by then is kept, so the policy is still safe, and its doc says so")
    parser.add_argument("--json", metavar="OUT", help="also write the audit, the decisions and the timings as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines (shown only on a terminal)")
    args = parser.parse_args(argv)
    if os.path.lexists(args.output) and not args.force:
        return _error(f"{args.output} exists; give --force to replace it")
    refuse_bad_outputs(parser, [args.output, args.json], [args.model] + ([args.from_run] if args.from_run else []))
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    if args.budget is not None and not args.budget > 0:
        parser.error("--budget must be a positive number of seconds")
    if args.verify_every < 1:
        parser.error("--verify-every must be at least 1")
    from ..common import model_spec as _model_spec

    try:
        spec = _model_spec.resolve(args.model)
        built = spec.build()
        report_path = args.from_run if args.from_run and args.from_run.endswith(".json") else None
        workload = _from_run.load(args.from_run) if args.from_run and not report_path else None
        from_report = _from_run.report_guards(report_path) if report_path else set()
    except ModelSpecError as e:
        return _error(f"--model: {e}")
    except _from_run.FromRunError as e:
        return _error(f"--from-run: {e}")
    name = identifier(args.name or "suggested_" + os.path.splitext(spec.label.split(":")[0])[0])
    backends = tuple(b.strip() for b in args.bench_backends.split(",") if b.strip())
    progress = for_terminal("suggest", args.quiet)
    verify = None if args.no_verify else args.verify_every
    from ..mutation.calls import AuditStateError, NotRepeatableError

    try:
        changed: set[tuple[str, str]] = set(from_report)
        seen: dict[str, list] = {}
        if workload is not None:
            first = suggest(built.fn, built.args, built.kwargs, name=name, spec=args.model, backend=args.backend,
                            verify=verify, progress=progress, budget=args.budget)
            run = _from_run.observe(workload, built, offered(first, args.model), args.backend, first.audit.groups)
            changed |= run.changed
            seen = run.values
            if progress:
                progress(f"--from-run: {len(changed)} guards failed during the run; auditing the values the run "
                         "gave them")
        s = suggest(built.fn, built.args, built.kwargs, name=name, spec=args.model, backend=args.backend,
                    bench_backends=backends, calls=args.calls, verify=verify, changed=changed, progress=progress,
                    budget=args.budget, seen=seen)
    except KeyboardInterrupt:
        print("python -m guardpolicy suggest: interrupted; the model and its inputs were restored", file=sys.stderr)
        return 130
    except (NotRepeatableError, AuditStateError, NothingToAudit, _from_run.FromRunError) as e:
        print(f"python -m guardpolicy suggest: error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"python -m guardpolicy suggest: error: {e}", file=sys.stderr)
        return 2
    finally:
        if progress:
            progress.done()
    if os.path.lexists(args.output) and not args.force:  # appeared while the audit ran
        print(f"python -m guardpolicy suggest: error: {args.output} exists; give --force to replace it",
              file=sys.stderr)
        return 2
    write_file(args.output, s.text, inputs=[_model_spec.split_spec(args.model)[0]])
    if args.json:
        write_file(args.json, s.to_json() + "\n")
    print(report(s, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
