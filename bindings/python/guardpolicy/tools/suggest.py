"""``python -m guardpolicy suggest --model MODEL -o OUT.gpol``: a policy for the user's model,
dropping exactly the guards the mutation audit found harmless.

1. The mutation audit (``guardpolicy.tools.mutation``) of ``skip_all_guards`` on the model:
   every guard torch offers is dropped there, so every group of guards (one piece of state)
   is changed the ways its guards would notice and classified.
2. The policy: ``default keep``; one ``drop when guard_type == T and name in {...}`` rule
   per guard type, over the exact names torch gave the guards of the **harmless** groups
   (a name and type with another verdict anywhere is never dropped, nor a value, type or
   tensor guard on an input: GP3008); every dangerous, caught and not mutated guard is kept. ``test`` blocks
   pin every decision: ``expect drop`` for each dropped guard, ``expect keep`` for each
   dangerous one. The text is loaded, linted and checked before it is written: a policy
   that would drop a dangerous guard is never written.
3. The measured per-call gain: ``no filter`` against the policy through ``guardpolicy.compile``
   (``guardpolicy.tools.latency``), per ``--bench-backends`` (default ``inductor,eager``).

The output is written atomically (``guardpolicy._files.write_file``) and never over an
existing file unless ``--force``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import sys
from collections import defaultdict
from typing import Any, Callable

from .._files import refuse_bad_outputs, write_file
from ._model_spec import MODEL_HELP, ModelSpecError

#: The audit policy: every guard dropped, so every guard is audited.
AUDIT_POLICY = "skip_all_guards"


@dataclasses.dataclass
class Suggestion:
    """What ``suggest`` found and wrote: the audit, the dropped and kept guards, the policy text."""

    name: str
    audit: Any  # mutation.MutationAudit
    dropped: list[tuple[str, str]]  # (name, guard_type)
    kept: dict[str, list[Any]]  # outcome -> groups kept
    text: str
    bench: dict[str, list[dict]] = dataclasses.field(default_factory=dict)

    def gain(self, backend: str) -> tuple[float, float] | None:
        """(no filter µs, policy µs) medians per call on ``backend``, if measured."""
        rows = self.bench.get(backend)
        if not rows:
            return None
        by = {r["variant"]: r["median_us"] for r in rows}
        mine = next((v for k, v in by.items() if k.startswith(self.name)), None)
        return (by["no filter"], mine) if mine is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.name, "dropped": [{"name": n, "guard_type": t} for n, t in self.dropped],
                "kept": {o: [g.name or "<ambient>" for g in gs] for o, gs in self.kept.items()},
                "audit": self.audit.to_dict(), "bench": self.bench}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def _gpol_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace(
        "\t", "\\t").replace("\r", "\\r") + '"'


def _identifier(text: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or "model"
    return ident if not ident[0].isdigit() else "m_" + ident


def decide(audit: Any) -> tuple[list[tuple[str, str]], dict[str, list[Any]]]:
    """``(dropped (name, guard_type) in offer order, kept groups by outcome)`` from the
    audit of a policy that dropped every guard."""
    verdicts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for group in audit.groups:
        for g in group.guards:
            verdicts[(g.name, g.guard_type)].add(group.verdict(g.guard_type))
    dropped: list[tuple[str, str]] = []
    kept: dict[str, list[Any]] = defaultdict(list)
    for group in audit.groups:
        kept_here = False
        for g in group.guards:
            key = (g.name, g.guard_type)
            if g.name and verdicts[key] == {"harmless"} and not input_guard(g) \
                    and not UNSTABLE_NAME.search(g.name):
                if key not in dropped:
                    dropped.append(key)
            else:
                kept_here = True
        if kept_here:
            kept[group.outcome if group.outcome != "harmless" else KEPT_HARMLESS].append(group)
    return dropped, dict(kept)


#: The kept groups that were harmless on the audit's backend: an input's (GP3008) or under
#: a name another compile may spell otherwise.
KEPT_HARMLESS = "harmless, kept (an input's: GP3008; or a name torch numbers per compile)"

#: Names with a per-process counter torch adds (``G['__builtins_dict___0']``): another
#: process may number them otherwise, so a rule on them would not match there.
UNSTABLE_NAME = re.compile(r"___\d+'\]")


#: The guard types the checker's GP3008 warns about on inputs (``guard_source`` ``LOCAL``):
#: TENSOR_MATCH on input tensors, the value and type guards on the other inputs and their items.
INPUT_GUARD_TYPES = ("TENSOR_MATCH", "CONSTANT_MATCH", "EQUALS_MATCH", "TYPE_MATCH")


def input_guard(guard: Any) -> bool:
    """A guard of ``INPUT_GUARD_TYPES`` with ``guard_source`` ``LOCAL`` (on an argument, or on
    something inside one: ``transformer_options['scale']``): never dropped (GP3008: an input
    tensor's dtype, shape, strides or ``requires_grad``, or a flag, number or dict entry passed
    in, could change under compiled code; the audit's few changes of a value cannot show that
    every other value is harmless, and on the eager backend real ops adapt where Inductor's
    kernels would not)."""
    return guard.guard_type in INPUT_GUARD_TYPES and guard.guard_source == "LOCAL"


def render(name: str, spec: str, audit: Any, dropped: list[tuple[str, str]], kept: dict[str, list[Any]],
           torch_version: str) -> str:
    """The ``.gpol`` text (see the module docstring)."""
    by_type: dict[str, list[str]] = defaultdict(list)
    for n, t in dropped:
        by_type[t].append(n)
    sources = {(g.name, g.guard_type): g.guard_source for grp in audit.groups for g in grp.guards}
    drop = set(dropped)
    counts: dict[str, int] = defaultdict(int)
    for grp in audit.groups:
        for g in grp.guards:
            if (g.name, g.guard_type) not in drop:
                counts[grp.verdict(g.guard_type)] += 1
    kept_text = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    doc = (f"For {spec}: drops the {len(dropped)} guards whose state the mutation audit changed without "
           f"effect on the output ({audit.backend} backend, torch {torch_version}, {date}); keeps every other "
           f"guard ({kept_text} guards).")
    lines = ["guardpolicy 1", "",
             f"# Written by `python -m guardpolicy suggest --model {spec}`. Every dropped name was changed",
             "# the way its guards notice, and the compiled model still matched eager; re-run suggest",
             "# when the model changes.",
             f"unsafe policy {name} {{" if dropped else f"policy {name} {{",
             f"  doc {_gpol_string(doc)}"]
    for gtype, names in by_type.items():
        members = ", ".join(_gpol_string(n) for n in names)
        # Never on an input (what the checker's GP3008 looks for; none is listed)
        extra = " and guard_source != LOCAL" if gtype in INPUT_GUARD_TYPES else ""
        lines.append(f"  drop when guard_type == {gtype}{extra} and name in {{{members}}}")
    lines += ["  default keep", "}", "", f"test {name} {{"]
    def expect(decision: str, n: str, t: str) -> str:
        return (f"  expect {decision} {{ name: {_gpol_string(n)}, guard_type: {_gpol_string(t)}, "
                f"guard_source: {_gpol_string(sources[(n, t)])} }}")

    for n, t in dropped:
        lines.append(expect("drop", n, t))
    for n, t in dict.fromkeys((g.name, g.guard_type) for _, g in audit.guards_with("dangerous")):
        lines.append(expect("keep", n, t))
    if not dropped and not audit.guards_with("dangerous"):
        lines.append('  expect keep { name: "", guard_type: "GLOBAL_STATE" }')
    lines += ["}", ""]
    return "\n".join(lines)


#: Lints that do not apply to a suggested policy: GP3011 says a `name` string may be one torch
#: never produces (`self.config.return_dict` is real only when `config` is no module); every
#: name suggest writes is one torch gave a guard of this model (GPT-2's config attributes).
CAPTURED_NAMES_LINT = "GP3011"


def check(text: str, audit: Any, dropped: list[tuple[str, str]]) -> list[str]:
    """Problems of the policy ``text``: diagnostics (but ``CAPTURED_NAMES_LINT``), a failing
    test block, or a decision on an audited guard that differs from the plan (a dangerous
    guard dropped above all)."""
    from ..loading import lint, load

    problems = [str(d) for d in lint(text) if d.code != CAPTURED_NAMES_LINT]
    if problems:
        return problems
    policy = load(text)
    rows = [{"name": g.name, "guard_type": g.guard_type, "guard_source": g.guard_source}
            for grp in audit.groups for g in grp.guards]
    want_drop = set(dropped)
    for row, keep in zip(rows, policy.evaluate(rows)):
        should_keep = (row["name"], row["guard_type"]) not in want_drop
        if keep != should_keep:
            problems.append(f"{row['guard_type']} {row['name']}: the policy would "
                            f"{'keep' if keep else 'drop'} it")
    dangerous = {(g.name, g.guard_type) for _, g in audit.guards_with("dangerous")}
    for row, keep in zip(rows, policy.evaluate(rows)):
        if not keep and (row["name"], row["guard_type"]) in dangerous:
            problems.append(f"{row['guard_type']} {row['name']}: dangerous, yet dropped")
    problems += _run_test_blocks(text)
    return problems


def _run_test_blocks(text: str) -> list[str]:
    """``guardpolicy test`` on ``text`` (in a child process: the command line prints to the
    process's stdout); its output when a test fails."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "suggested.gpol")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        r = subprocess.run([sys.executable, "-m", "guardpolicy", "test", path], capture_output=True, text=True)
    if r.returncode != 0 or " 0 failed" not in r.stdout:
        return [f"guardpolicy test: exit {r.returncode}: {(r.stdout + r.stderr).strip()}"]
    return []


def suggest(fn: Any, args: tuple = (), kwargs: dict | None = None, *, name: str = "suggested", spec: str = "model",
            backend: str = "eager", bench_backends: tuple[str, ...] = (), calls: int = 200, block: int = 20,
            progress: Callable[[str], None] | None = None) -> Suggestion:
    """Audits ``fn(*args, **kwargs)`` with every guard dropped, then renders, loads and
    checks the policy (``ValueError`` listing the problems if it fails its own checks); with
    ``bench_backends``, measures no filter against it per backend."""
    import torch

    from . import latency, mutation
    from ..loading import load

    result = mutation.audit(fn, args, kwargs, AUDIT_POLICY, label=spec, backend=backend, progress=progress)
    if result.problems:
        raise ValueError("; ".join(result.problems))
    dropped, kept = decide(result)
    text = render(name, spec, result, dropped, kept, torch.__version__)
    problems = check(text, result, dropped)
    if problems:
        raise ValueError("the suggested policy fails its own checks:\n  " + "\n  ".join(problems))
    out = Suggestion(name, result, dropped, kept, text)
    policy = load(text)
    for b in bench_backends:
        if progress:
            progress(f"{spec}: timing no filter against {name}, {b} backend")
        out.bench[b] = latency.measure_model(fn, tuple(args), dict(kwargs or {}), [policy], b, calls, block)
    return out


def report(s: Suggestion, out_path: str) -> str:
    """What ``suggest`` prints: the audit counts, the gain per backend, what stays protected."""
    counts = s.audit.guard_counts()
    lines = [f"wrote {out_path}: policy {s.name} drops {len(s.dropped)} of {s.audit.offered} guards "
             f"(audit on the {s.audit.backend} backend: " + ", ".join(f"{o} {n}" for o, n in counts.items()) +
             f"; compile {s.audit.compile_s:.1f} s, mutations {s.audit.audit_s:.1f} s)"]
    for backend in s.bench:
        gain = s.gain(backend)
        if gain:
            base, mine = gain
            lines.append(f"  per call, {backend}: no filter {base:.1f} µs -> {s.name} {mine:.1f} µs "
                         f"({mine / base:.2f}x, {base - mine:+.1f} µs saved)")
    lines.append("  stays protected:")
    for outcome in ("dangerous", "caught", "not mutated", KEPT_HARMLESS):
        groups = s.kept.get(outcome, [])
        if groups:
            names = [g.name or "<ambient>" for g in groups]
            shown = ", ".join(names[:6]) + (f", … {len(names) - 6} more" if len(names) > 6 else "")
            lines.append(f"    {outcome} ({len(groups)} states): {shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the policy was written; 2 on bad arguments, a bad model, an existing
    output without --force, or a policy that failed its own checks."""
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy suggest",
        description="Mutation-audit a model's guards (each one's state changed the way it would notice), "
                    "write a policy that drops only the guards found harmless, and measure the per-call gain.")
    parser.add_argument("--model", required=True, metavar="MODEL", help=MODEL_HELP)
    parser.add_argument("-o", "--output", required=True, metavar="OUT.gpol", help="the policy file to write")
    parser.add_argument("--force", action="store_true", help="replace OUT.gpol if it exists")
    parser.add_argument("--name", help="the policy's name (default: from the model)")
    parser.add_argument("--backend", default="inductor",
                        help="the audit's backend (default inductor, what users run; eager is faster to compile "
                             "but runs real ops on any input, so tensor changes show less there)")
    parser.add_argument("--bench-backends", default="inductor,eager",
                        help="comma-separated backends to time no filter against the policy on (default "
                             "inductor,eager; empty: no timing)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per variant (default 200)")
    parser.add_argument("--json", metavar="OUT", help="also write the audit, the decisions and the timings as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if os.path.lexists(args.output) and not args.force:
        parser.error(f"{args.output} exists; give --force to replace it")
    refuse_bad_outputs(parser, [args.output, args.json], [args.model])
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    from . import _model_spec

    try:
        spec = _model_spec.resolve(args.model)
        built = spec.build()
    except ModelSpecError as e:
        parser.error(f"--model: {e}")
    name = _identifier(args.name or "suggested_" + os.path.splitext(spec.label.split(":")[0])[0])
    backends = tuple(b.strip() for b in args.bench_backends.split(",") if b.strip())
    progress = None if args.quiet else (lambda msg: print(f"  … {msg}", file=sys.stderr, flush=True))
    try:
        s = suggest(built.fn, built.args, built.kwargs, name=name, spec=args.model, backend=args.backend,
                    bench_backends=backends, calls=args.calls, progress=progress)
    except ValueError as e:
        print(f"python -m guardpolicy suggest: error: {e}", file=sys.stderr)
        return 2
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
