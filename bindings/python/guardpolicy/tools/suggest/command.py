"""``python -m guardpolicy suggest --model MODEL -o OUT.gpol``: a policy for the user's model,
dropping exactly the guards the mutation audit found harmless.

1. The mutation audit (``guardpolicy.tools.mutation``) of ``skip_all_guards`` on the model:
   every guard torch offers is dropped there, so every group of guards (one piece of state)
   is changed the ways its guards would notice and classified.
2. The policy: ``default keep``; one ``drop when guard_type == T and name in {...}`` rule
   per guard type, over the exact names torch gave the guards of the **harmless** groups
   (a name and type with another verdict anywhere is never dropped, nor a value, type or
   tensor guard on an input: GP3008, unless ``--from-run`` proved it harmless on the values the
   user's run gave it); every dangerous, caught and not mutated guard is kept. ``test`` blocks
   pin every decision: ``expect drop`` for each dropped guard, ``expect keep`` for each
   dangerous one. The text is loaded, linted and checked before it is written: a policy
   that would drop a dangerous guard is never written.
3. The measured per-call gain: ``no filter`` against the policy through ``guardpolicy.compile``
   (``guardpolicy.tools.latency``), per ``--bench-backends`` (default ``inductor,eager``).

The output is written atomically (``guardpolicy.api.files.write_file``) and never over an
existing file unless ``--force``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import sys
from collections import defaultdict
from typing import Any, Callable

from ...api.policy_text import PolicyText

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
    verify: int | None = None  # the policy's verify every N calls (None: none)
    source: PolicyText | None = None  # ``text`` as a structure (a verify or dispatch line added: frontier, decode)
    from_run: list = dataclasses.field(default_factory=list)  # dropped though they failed in the user's run (proven)

    def gain(self, backend: str) -> tuple[float, float] | None:
        """(no filter µs, policy µs) medians per call on ``backend``, if measured."""
        rows = self.bench.get(backend)
        if not rows:
            return None
        by = {r["variant"]: r["median_us"] for r in rows if "median_us" in r}
        mine = next((v for k, v in by.items() if k.startswith(self.name)), None)
        return (by["no filter"], mine) if mine is not None and "no filter" in by else None

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.name, "verify": self.verify,
                "dropped": [{"name": n, "guard_type": t} for n, t in self.dropped],
                "dropped_from_run": [{"name": n, "guard_type": t} for n, t in self.from_run],
                "kept": {o: [g.name or "<ambient>" for g in gs] for o, gs in self.kept.items()},
                "audit": self.audit.to_dict(), "bench": self.bench}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


class NothingToAudit(RuntimeError):
    """torch.compile compiled no frame of the model: it has no guard to audit."""


def identifier(text: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or "model"
    return ident if not ident[0].isdigit() else "m_" + ident


#: ``verify every N calls`` in a suggested policy unless told otherwise.
DEFAULT_VERIFY = 100

def rule_key(g: Any) -> tuple[str, str]:
    """What a rule of the suggested policy matches a guard by: its path and type, or, for a
    guard without a path, its name and type."""
    return (f"path:{g.path}" if g.path else f"name:{g.name}", g.guard_type)


def keep_reason(g: Any, verdicts: set[str], changed: set[tuple[str, str]],
                proven: set[tuple[str, str]] = frozenset(), offer_inputs: bool = False) -> str | None:
    """Why the guard ``g`` is kept (None: it is dropped). ``verdicts``: of every audited guard
    with ``g``'s rule key; ``changed``: ``(name, guard_type)`` that failed during the user's own
    run (``--from-run``); ``proven``: those of them the audit tried with every value the run
    gave their state, each harmless (``proven_by_run``): dropped even on an input;
    ``offer_inputs``: an input's harmless guard is dropped too (``offered``: the policy the
    user's run is tried under, never written)."""
    run = (g.name, g.guard_type) in changed
    if verdicts != {"harmless"}:
        return "not harmless on every value tried"
    if not g.name:
        return "ambient"
    if not g.path:
        return "no path to name it by (a chain through type(), __dict__)"
    if run and (g.name, g.guard_type) not in proven:
        return "its state changed during the user's run, and the audit did not try the values the run gave it"
    if input_guard(g) and not run and not offer_inputs:
        return "an input's (the caller decides it per call: GP3008 and the input's structure)"
    if g.guard_type == "TENSOR_MATCH":
        return ("a tensor the policy installs as a free tensor (its config line): replaced, it is stale unless "
                "a guard sees it")
    if UNSTABLE_NAME.search(g.name):
        return "a name torch numbers per compile"
    return None


def proven_by_run(audit: Any, changed: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The guards of ``changed`` (``(name, guard_type)`` that failed during the user's run)
    whose state the audit changed to the values the run gave it (``mutation.SEEN`` trials,
    ``audit(..., seen=...)``), every one applied and harmless, output and written state."""
    from ..mutation.plan import SEEN

    out = set()
    for group in audit.groups:
        for g in group.guards:
            if (g.name, g.guard_type) not in changed:
                continue
            tried = [t for t in group.trials if t.mutation.endswith(SEEN) and g.guard_type in t.guard_types]
            if tried and all(t.outcome == "harmless" for t in tried):
                out.add((g.name, g.guard_type))
    return out


def decide(audit: Any, changed: set[tuple[str, str]] = frozenset(), offer_inputs: bool = False
           ) -> tuple[list[tuple[str, str]], dict[str, list[Any]]]:
    """``(dropped (name, guard_type) in offer order, kept groups by outcome)`` from the
    audit of a policy that dropped every guard: a guard is dropped only when every guard
    its rule would match was harmless on every value tried (and ``keep_reason`` has none;
    a guard that failed in the user's run only when ``proven_by_run``)."""
    verdicts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for group in audit.groups:
        for g in group.guards:
            verdicts[rule_key(g)].add(group.verdict(g.guard_type))
    proven = proven_by_run(audit, changed)
    blocked = {rule_key(g) for group in audit.groups for g in group.guards
               if keep_reason(g, verdicts[rule_key(g)], changed, proven, offer_inputs) is not None}
    dropped: list[tuple[str, str]] = []
    kept: dict[str, list[Any]] = defaultdict(list)
    for group in audit.groups:
        kept_here = False
        for g in group.guards:
            if rule_key(g) not in blocked:
                if (g.name, g.guard_type) not in dropped:
                    dropped.append((g.name, g.guard_type))
            else:
                kept_here = True
        if kept_here:
            kept[group.outcome if group.outcome != "harmless" else KEPT_HARMLESS].append(group)
    return dropped, dict(kept)


#: The kept groups that were harmless on the audit's backend: an input's (GP3008), a tensor
#: the policy installs as a free tensor, a name torch numbers per compile, or state the user's
#: run changed to values the audit did not try.
KEPT_HARMLESS = "harmless, kept (an input's, a free tensor, a per-compile name, or changed in your run)"

#: Names with a per-process counter torch adds (``G['__builtins_dict___0']``): another
#: process may number them otherwise, so a rule on them would not match there.
UNSTABLE_NAME = re.compile(r"___\d+'\]")


#: The guard types suggest never drops on inputs (``guard_source`` ``LOCAL``): those the
#: checker's GP3008 warns about (TENSOR_MATCH on input tensors, the value and type guards on the
#: other inputs and their items), and the guards on an input's structure.
INPUT_GUARD_TYPES = ("TENSOR_MATCH", "CONSTANT_MATCH", "EQUALS_MATCH", "TYPE_MATCH",
                     # and what an input holds: the keys of ``**kwargs`` (a keyword argument passed or
                     # not), a sequence's length, None or not, the object passed
                     "DICT_KEYS_MATCH", "DICT_CONTAINS", "DICT_NOT_CONTAINS", "MAPPING_KEYS_CHECK",
                     "SEQUENCE_LENGTH", "NONE_MATCH", "NOT_NONE_MATCH", "BOOL_MATCH", "ID_MATCH")


def input_guard(guard: Any) -> bool:
    """A guard of ``INPUT_GUARD_TYPES`` with ``guard_source`` ``LOCAL`` (on an argument, or on
    something inside one: ``transformer_options['scale']``): never dropped (GP3008: an input
    tensor's dtype, shape, strides or ``requires_grad``, or a flag, number or dict entry passed
    in, could change under compiled code; the audit's few changes of a value cannot show that
    every other value is harmless, and on the eager backend real ops adapt where Inductor's
    kernels would not)."""
    return guard.guard_type in INPUT_GUARD_TYPES and guard.guard_source == "LOCAL"


def _guards(audit: Any) -> list[Any]:
    return [g for grp in audit.groups for g in grp.guards]


def render(name: str, spec: str, audit: Any, dropped: list[tuple[str, str]], kept: dict[str, list[Any]],
           torch_version: str, verify: int | None = DEFAULT_VERIFY) -> PolicyText:
    """The policy (``render.render``; ``.render()`` is its ``.gpol`` text)."""
    from . import render as suggest_render

    every = _guards(audit)
    drop = set(dropped)
    dropped_guards = list({(g.name, g.guard_type, g.path): g for g in every if (g.name, g.guard_type) in drop}.values())
    inputs = [g for g in dropped_guards if input_guard(g)]
    dangerous = [g for _, g in audit.guards_with("dangerous")]
    counts: dict[str, int] = defaultdict(int)
    for grp in audit.groups:
        for g in grp.guards:
            if (g.name, g.guard_type) not in drop:
                counts[grp.verdict(g.guard_type)] += 1
    kept_text = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    doc = (f"For {spec}: drops the {len(dropped)} guards whose state the mutation audit changed to every value "
           f"it tried without effect on the output ({audit.backend} backend, torch {torch_version}, {date}); "
           f"keeps every other guard ({kept_text} guards).")
    if audit.budget_cut:
        doc += (f" The audit's --budget ended it early: {audit.budget_cut} of {audit.planned} planned changes were "
                "not tried, and the guards of every state they belong to are kept.")
    if inputs:
        doc += (f" It drops {len(inputs)} guards on inputs that changed during your run (suggest --from-run): the "
                "audit tried each with the values your run gave it, output and written state equal to eager's.")
    if verify is None and dropped:
        doc += (" WARNING: written with --no-verify: nothing re-checks the dropped guards, so a change the audit "
                "did not try is served stale.")
    elif dropped:
        doc += f" Every {verify} calls the dropped guards are re-checked (verify) and a failure recompiles."
    header = [f"Written by `python -m guardpolicy suggest --model {spec}`. Every dropped guard's state",
              "was changed to each value the audit tries (boundaries, both directions) and the compiled",
              "model still matched eager; re-run suggest when the model changes."]
    return suggest_render.render(name, doc, header, dropped_guards, every, dangerous, verify, INPUT_GUARD_TYPES,
                                 inputs)


#: The checker's warning a policy dropping input guards proven on the user's run carries.
INPUT_WARNING = ("GP3008", "guards on non-tensor inputs")


def offered(s: Suggestion, spec: str) -> str:
    """The policy a ``--from-run`` workload runs under (in dry-run): ``s``'s, dropping the
    inputs' harmless guards too, so that the run names those that fail (a per-call
    ``run_id``) and their values; never written."""
    import torch

    dropped, kept = decide(s.audit, offer_inputs=True)
    text = render(s.name, spec, s.audit, dropped, kept, torch.__version__, s.verify).render()
    problems = check(text, s.audit, dropped, run_tests=False)
    if problems:
        raise ValueError("the policy offered to the run fails its own checks:\n  " + "\n  ".join(problems))
    return text


def check(text: str, audit: Any, dropped: list[tuple[str, str]], run_tests: bool = True) -> list[str]:
    """Problems of the policy ``text``: any diagnostic (but GP3008 on non-tensor inputs where
    it drops an input's guard ``suggest --from-run`` proved harmless), a failing test block,
    or a decision on an audited guard that differs from the plan (a dangerous guard dropped
    above all)."""
    from ...api.loading import lint, load

    drop = set(dropped)
    inputs = any(input_guard(g) and (g.name, g.guard_type) in drop for g in _guards(audit))
    problems = [str(d) for d in lint(text)
                if not (inputs and d.code == INPUT_WARNING[0] and INPUT_WARNING[1] in d.message)]
    if problems:
        return problems
    policy = load(text)
    guards = _guards(audit)
    rows = [{"name": g.name, "guard_type": g.guard_type, "guard_source": g.guard_source, "path": g.path}
            for g in guards]
    want_drop = set(dropped)
    dangerous = {(g.name, g.guard_type) for _, g in audit.guards_with("dangerous")}
    for row, keep in zip(rows, policy.evaluate(rows)):
        key = (row["name"], row["guard_type"])
        if keep != (key not in want_drop):
            problems.append(f"{row['guard_type']} {row['name']}: the policy would {'keep' if keep else 'drop'} it")
        if not keep and key in dangerous:
            problems.append(f"{row['guard_type']} {row['name']}: dangerous, yet dropped")
    if run_tests:
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


def _timed(fn: Any, args: tuple, kwargs: dict, policy: Any, backends: tuple[str, ...], calls: int, block: int,
           progress: Callable[[str], None] | None, spec: str) -> dict[str, list[dict]]:
    """Per backend, no filter against ``policy`` with one torch thread, from and back to the
    caller's state (a KV cache the calls write is restored afterwards)."""
    import torch

    from .. import latency
    from ..mutation.calls import Session
    from ..mutation.record import Call

    session = Session(Call(fn, args, kwargs))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    try:
        with torch.random.fork_rng(devices=[]):  # the timed calls' random numbers are not the caller's
            for b in backends:
                if progress:
                    progress(f"{spec}: timing no filter against {policy.name}, {b} backend, one torch thread")
                try:
                    out[b] = latency.measure_model(fn, args, kwargs, [policy], b, calls, block)
                except (Exception, SystemExit) as e:  # noqa: BLE001 - a call that keeps state (a cache
                    # filling up, latency's output check failing on it) cannot be timed this way
                    out[b] = [{"variant": "error", "error": f"{type(e).__name__}: {e}"[:200]}]
                session.restore()
    finally:
        torch.set_num_threads(threads)
        session.restore()
    return out


def suggest(fn: Any, args: tuple = (), kwargs: dict | None = None, *, name: str = "suggested", spec: str = "model",
            backend: str = "eager", bench_backends: tuple[str, ...] = (), calls: int = 200, block: int = 20,
            verify: int | None = DEFAULT_VERIFY, changed: set[tuple[str, str]] = frozenset(),
            progress: Callable[[str], None] | None = None, budget: float | None = None,
            seen: dict[str, list] | None = None) -> Suggestion:
    """Audits ``fn(*args, **kwargs)`` with every guard dropped, then renders, loads and
    checks the policy (``ValueError`` listing the problems if it fails its own checks); with
    ``bench_backends``, measures no filter against it per backend, with one torch thread.
    ``verify``: the policy's ``verify every N calls`` (None: no such line); ``changed``:
    ``(name, guard_type)`` of guards that failed during a real run, dropped only where the
    audit proved them harmless on the values ``seen`` (per guard name, the values that run
    gave the state: ``from_run.observe``), else kept; ``budget``: seconds after which the
    audit tries no further change (the unfinished states are kept, and the policy's doc says
    so)."""
    import torch

    from .. import mutation
    from ...api.loading import load

    result = mutation.audit(fn, args, kwargs, AUDIT_POLICY, label=spec, backend=backend, progress=progress,
                            budget=budget, seen=seen)
    if result.problems:
        raise ValueError("; ".join(result.problems))
    if result.frames == 0:
        from ...runtime import torch_internals

        raise NothingToAudit(
            "torch.compile compiled no frame of the model: Dynamo ran all of it in eager (modules a release skips: "
            f"nn.GRU and nn.LSTM on torch 2.11 to 2.14 unless {torch_internals.DYNAMO_CONFIG}.allow_rnn = True; "
            "TORCH_LOGS=graph_breaks says why), so there is no guard to audit and no policy is written")
    dropped, kept = decide(result, set(changed))
    source = render(name, spec, result, dropped, kept, torch.__version__, verify)
    text = source.render()
    problems = check(text, result, dropped)
    if problems:
        raise ValueError("the suggested policy fails its own checks:\n  " + "\n  ".join(problems))
    out = Suggestion(name, result, dropped, kept, text, verify=verify, source=source,
                     from_run=[d for d in dropped if d in set(changed)])
    if bench_backends:
        out.bench = _timed(fn, tuple(args), dict(kwargs or {}), load(text), tuple(bench_backends), calls, block,
                           progress, spec)
    return out
