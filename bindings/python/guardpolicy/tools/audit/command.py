"""``python -m guardpolicy audit``'s command line (``main``): the fixed-change audit with
``--changes``/``--change``/``--verify``, else the guard-driven mutation audit
(``guardpolicy.tools.mutation``); text on stdout, JSON with ``--json``."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
from typing import Any

from ...api.files import refuse_bad_outputs, write_file
from ...api.loading import STD_POLICIES
from ...runtime import torch_internals
from ...runtime.logs import tool_objects
from ..common.model_spec import MODEL_HELP, ModelSpecError
from ..common.progress import for_terminal
from ..common.timing.machine import peak_rss_mib
from .changes import CHANGE_KEYS, CHANGES
from .model import MODEL_NAMES
from .results import LEGEND, VERIFY_LEGEND, PolicyAudit, format_matrix, format_policy_table, soundness_findings
from .run import DEFAULT_POLICIES, resolve_policy, run_audit


def _parse_config(items: list[str] | None) -> dict[str, Any]:
    """``{knob: value}`` from the ``--dynamo-config KEY=VALUE`` items: the value as a Python
    literal (``False``, ``64``), else as the string. ValueError on an item without ``=`` or key."""
    import ast

    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--dynamo-config: expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()
    return out



def _dynamo_config(config: dict[str, Any]) -> Any:
    """A context with the ``--dynamo-config`` knobs set for its body (a null one without any)."""
    return torch_internals.config_patch(**config) if config else contextlib.nullcontext()


def main(argv: list[str] | None = None) -> int:
    """Runs the audit. Exit 0 when done; 1 when a policy that dropped no guard is stale or
    fails where torch without a filter is right (a guardpolicy bug, printed); 2 on bad
    arguments or an unloadable policy."""
    parser = _parser()
    args = parser.parse_args(argv)
    refuse_bad_outputs(parser, [args.json], [*(args.policy or []), *(args.model or [])])
    if args.verify < 0:
        parser.error(f"--verify: a number of calls >= 1, not {args.verify}")
    if not (args.changes or args.change or args.verify):  # --verify is about the fixed changes' stale cells
        return _main_mutation(parser, args, argv)
    with tool_objects():  # its own models, compiled by it (logs.tool_objects)
        return _main_changes(parser, args, argv)


def _parser() -> argparse.ArgumentParser:
    """The command line of both audits: the mutation audit's options, and ``--changes``,
    ``--change``, ``--verify`` and ``--markdown`` for the fixed changes."""
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy audit",
        description="Compile a model under each policy, change one piece of state at a time, and "
                    "classify each change: recompiled, unaffected, or stale (a silent wrong result).",
    )
    parser.add_argument("--model", action="append", metavar="MODEL",
                        help=f"repeatable: {MODEL_HELP}. The mutation audit takes any model (default: "
                             f"{' '.join(MODEL_NAMES)}); --changes only the audit models {', '.join(MODEL_NAMES)}")
    parser.add_argument("--policy", nargs="+", action="extend", metavar="FILE",
                        help="policy files (.gpol/.gpolc), standard policy names or keep_all; repeatable "
                             "(--policy A --policy B audits both, a report each; default: the six standard "
                             "policies, and keep_all with --changes)")
    parser.add_argument("--changes", action="store_true",
                        help="the fixed state changes of the audit models (CHANGES) instead of the "
                             "guard-driven mutation audit")
    parser.add_argument("--change", action="append", metavar="KEY",
                        help=f"with --changes (implied): only these changes, repeatable or comma-separated: "
                             f"{', '.join(CHANGE_KEYS)}")
    parser.add_argument("--backend", default="eager",
                        help="the mutation audit's backend (default eager; inductor is what users run)")
    parser.add_argument("--dynamo-config", action="append", metavar="KEY=VALUE",
                        help=f"{torch_internals.DYNAMO_CONFIG} setting for the whole audit, repeatable "
                             "(e.g. skip_nnmodule_hook_guards=False)")
    parser.add_argument("--verify", type=int, metavar="N", default=0,
                        help="also run each stale or error cell under gp.compile(verify=N, "
                             "on_violation=recompile) and say whether and after how many calls it was caught")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown (--changes)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress lines (shown on stderr only when it is a terminal)")
    return parser


def _main_changes(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None) -> int:
    """The fixed-change audit (``--changes``, ``--change``, ``--verify``): the matrix and one
    table per policy and model on stdout, the soundness findings, JSON with --json. Exit as
    ``main``."""
    bad = [m for m in args.model or () if m not in MODEL_NAMES]
    if bad:
        parser.error(f"--changes: the fixed changes need an audit model ({', '.join(MODEL_NAMES)}), not "
                     f"{', '.join(bad)}; without --changes the mutation audit takes any model")

    models = list(dict.fromkeys(args.model or MODEL_NAMES))
    changes = _selected_changes(parser, args.change)
    setup = _setup(parser, args, argv, DEFAULT_POLICIES, "eager")
    if setup is None:
        return 2
    config, policies, progress, report = setup
    report.update({"verify": args.verify or None, "legend": LEGEND, "changes": {c.key: c.what for c in changes},
                   "models": {}})
    with _dynamo_config(config):
        results, _ = run_audit(models, policies, changes, progress, args.verify)
    if progress:
        progress.done()
    bugs, gaps = soundness_findings(results)
    _print_tables(results, report, config, args.verify, args.markdown)
    _print_findings(gaps, bugs, args.markdown)
    report["keep_all_violations"] = {"guardpolicy_bugs": bugs, "torch_unguarded": gaps}
    if args.json:
        write_file(args.json, json.dumps(report, indent=2) + "\n")
    return 1 if bugs else 0


def _selected_changes(parser: argparse.ArgumentParser, items: list[str] | None) -> tuple:
    """The ``Change``s of ``--change`` (repeatable, comma-separated keys), in table order;
    every change without any. An unknown key, or none at all, is a usage error."""
    if not items:
        return CHANGES
    wanted = [k.strip() for item in items for k in item.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in CHANGE_KEYS]
    if unknown or not wanted:
        parser.error(f"--change: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(CHANGE_KEYS)}")
    return tuple(c for c in CHANGES if c.key in wanted)


def _print_tables(results: dict[str, list[PolicyAudit]], report: dict, config: dict[str, Any], verify: int,
                  md: bool) -> None:
    """The head line, the legend, then per model the matrix and each policy's table (text,
    or Markdown with ``md``); each model's ``PolicyAudit``s also go into ``report["models"]``."""
    import torch

    settings = "".join(f" · {k}={v!r}" for k, v in config.items())
    print(f"guardpolicy audit · torch {torch.__version__} · backend eager{settings} · {report['date']}")
    if md:
        print()
    print(LEGEND)
    if verify:
        print(VERIFY_LEGEND)
    for model_name, audits in results.items():
        print()
        print(f"{'### ' if md else '=== '}{model_name}: changes × policies")
        print()
        print(format_matrix(audits, markdown=md))
        for pa in audits:
            print()
            print(format_policy_table(pa, markdown=md))
        report["models"][model_name] = [pa.to_json() for pa in audits]


def _print_findings(gaps: list[str], bugs: list[str], md: bool) -> None:
    """The soundness findings under the tables: the torch gaps (``†``), then the guardpolicy
    bugs (``✗``), each a bullet line."""
    bullet = "- " if md else "  "
    if gaps:
        print()
        print("† stale under a policy that dropped no guard, and just as stale with no guard_filter_fn "
              "(torch does not guard these changes; not a guardpolicy bug):")
        if md:
            print()
        for line in gaps:
            print(f"{bullet}{line}")
    if bugs:
        print()
        print("✗ stale or failing under a policy that dropped no guard, while torch without a filter is "
              "right (a guardpolicy soundness bug):")
        if md:
            print()
        for line in bugs:
            print(f"{bullet}{line}")


def _setup(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None,
           default_policies: tuple[str, ...] | list[str], backend: str) -> tuple[dict, list, Any, dict] | None:
    """What both audits start from: ``(dynamo config, policies, progress callback or None,
    the report's head: torch, date, command, backend, dynamo_config)``; None when a policy does
    not load (its error printed; exit 2). A bad --dynamo-config is a usage error."""
    from ...api.errors import PolicyError

    try:
        config = _parse_config(args.dynamo_config)
    except ValueError as e:
        parser.error(str(e))
    try:
        policies = [resolve_policy(spec) for spec in dict.fromkeys(args.policy or default_policies)]
    except PolicyError as e:
        print(str(e), file=sys.stderr)
        return None

    import torch

    unknown_config = [k for k in config if not torch_internals.has_config(k)]
    if unknown_config:
        parser.error(f"--dynamo-config: {torch_internals.DYNAMO_CONFIG} has no {', '.join(unknown_config)}")
    progress = for_terminal("audit", args.quiet)
    started = datetime.datetime.now(datetime.timezone.utc)
    argv_text = " ".join(sys.argv[2:] if argv is None else argv)
    report = {"torch": torch.__version__, "date": started.strftime("%Y-%m-%d %H:%M UTC"),
              "command": f"python -m guardpolicy audit {argv_text}".rstrip(), "backend": backend,
              "dynamo_config": config}
    return config, policies, progress, report


def _main_mutation(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None) -> int:
    """The guard-driven mutation audit of each --policy on each --model
    (``guardpolicy.tools.mutation``): text per policy, JSON with --json. Exit 0 when it ran,
    1 when a compiled model differs from eager before any change, 2 on bad arguments."""
    from ..common import model_spec as _model_spec
    from .. import mutation

    try:
        specs = [_model_spec.resolve(m) for m in dict.fromkeys(args.model or MODEL_NAMES)]
    except ModelSpecError as e:
        parser.error(f"--model: {e}")
    setup = _setup(parser, args, argv, STD_POLICIES, args.backend)
    if setup is None:
        return 2
    config, policies, progress, report = setup
    import torch

    report.update({"legend": mutation.LEGEND, "models": {}})
    print(f"guardpolicy audit (guard-driven mutations) · torch {torch.__version__} · backend {args.backend} · "
          f"{report['date']}")
    print(mutation.LEGEND)
    failed = False
    with _dynamo_config(config):
        for spec in specs:
            try:
                built = spec.build()
            except ModelSpecError as e:
                print(f"python -m guardpolicy audit: error: --model {spec.origin}: {e}", file=sys.stderr)
                return 2
            audits = []
            for label, source, policy in policies:
                try:
                    with tool_objects():  # the audit's compiled objects, not the user's (logs.tool_objects)
                        result = mutation.audit(built.fn, built.args, built.kwargs, policy, label=spec.label,
                                                policy_label=label, backend=args.backend, progress=progress)
                except KeyboardInterrupt:
                    print("python -m guardpolicy audit: interrupted; the model and its inputs were restored",
                          file=sys.stderr)
                    return 130
                except (mutation.NotRepeatableError, mutation.AuditStateError) as e:
                    print(f"python -m guardpolicy audit: error: --model {spec.origin}: {e}", file=sys.stderr)
                    return 1
                result.source = source
                if progress:
                    progress.done()
                print()
                print(result.table())
                failed = failed or bool(result.problems)
                audits.append(result.to_dict())
            report["models"][spec.label] = audits
    report["peak_rss_mib"] = round(peak_rss_mib(), 1)
    print(f"\npeak memory {report['peak_rss_mib']:.0f} MiB (this process's maximum resident set)")
    if args.json:
        write_file(args.json, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 1 if failed else 0
