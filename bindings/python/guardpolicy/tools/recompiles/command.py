"""``recompiles``: from a recompile storm to a proven fix. The steps:

1. the loop (``run(compiled, model)``) runs eagerly once, for reference, and compiled with
   ``watch_state`` (the safe setting): every recompile is recorded with the guard that
   failed in each cache entry (``gp.stats(c).recompiles``);
2. the guards that failed in ``verdicts.STORM_AFTER`` recompiles or more are the storms; the
   value guards among them are candidate drops, which the mutation audit tries on the
   model's example call, at its own values and at the values the run's cache entries were
   compiled for (outputs *and* the state the call writes compared with eager's);
3. each storm gets its verdict (``verdicts.classify``); the policy ``fix`` extends
   ``watch_state`` with the proven drops and the config lines;
4. the loop runs again under ``fix``; ``after`` counts its compiles, eager fallbacks and the
   calls whose output or state differs from the eager pass's.

``RecompilesReport`` holds it all; ``render.table`` and ``RecompilesReport.to_json`` show it.
Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

from ...api.policy_text import PolicyText
from ..mutation.plan import SEEN
from . import loop
from .verdicts import UNSPEC_INT, Storm, classify, failed, storms_of

#: The value guards a drop may be proven for (the mutation audit changes their value).
VALUE_GUARDS = ("EQUALS_MATCH", "CONSTANT_MATCH", "LENGTH_CHECK", "SEQUENCE_LENGTH", "DICT_LENGTH", "DICT_KEYS_MATCH",
                "TYPE_MATCH", "ID_MATCH")
#: Runs of the loop under a fix at most: a fixed guard can uncover the next (torch names only
#: the first failing guard of each cache entry).
MAX_ROUNDS = 3


@dataclasses.dataclass
class Outcome:
    """One compiled pass of the loop: ``compiles`` (frames compiled), ``eager_fallback``
    (torch stopped compiling a frame at a recompile limit), ``wrong`` (calls whose output
    differs from eager's), ``wrong_state`` (calls after which the model's state differs),
    ``first_difference`` and ``seconds``."""

    compiles: int
    eager_fallback: bool
    wrong: int
    wrong_state: int
    first_difference: str = ""
    seconds: float = 0.0


@dataclasses.dataclass
class RecompilesReport:
    """What ``python -m guardpolicy recompiles`` found. ``calls``: calls of the loop;
    ``recompiles``: every failure of every recompile (``runtime.recompiles.FailedGuard``);
    ``storms``: ``verdicts.Storm``, most failures first; ``policy``: the fix's text (``""``
    when nothing a policy can fix stormed); ``before``, ``after``: ``Outcome`` of the loop
    under ``watch_state`` and under the fix (``after`` None without a fix); ``live``: made by
    ``gp.recompiles`` from a live object (nothing run: ``wrong`` -1, nothing proven)."""

    calls: int
    recompiles: list
    storms: list[Storm]
    policy: str = ""
    before: Outcome | None = None
    after: Outcome | None = None
    live: bool = False

    @property
    def unfixed(self) -> list[Storm]:
        """The storms no policy line fixes (dynamic, tensor, structure, keep)."""
        return [s for s in self.storms if not s.line]

    @property
    def proven(self) -> bool:
        """The fix ran the loop with every output and state equal eager's, and none of the
        storms its lines fix stormed again (an eager fallback that other storms cause is theirs)."""
        a = self.after
        return bool(self.policy) and a is not None and a.wrong == 0 and a.wrong_state == 0

    def table(self, out_path: str | None = None) -> str:
        """The report as the command prints it (``render.table``)."""
        from .render import table

        return table(self, out_path)

    __str__ = table

    def to_json(self) -> str:
        return json.dumps({
            "calls": self.calls,
            "recompiles": [dataclasses.asdict(g) for g in self.recompiles],
            "storms": [s.to_dict() for s in self.storms],
            "policy": self.policy,
            "before": dataclasses.asdict(self.before) if self.before else None,
            "after": dataclasses.asdict(self.after) if self.after else None,
        }, indent=2)


def fix_policy(name: str, storms: list[Storm], verify: int | None = None) -> str:
    """The policy ``name`` that extends ``watch_state`` with the storms' lines (drops first,
    then config lines, each once); ``verify``: its ``verify every N calls`` (drops only)."""
    drops = tuple(dict.fromkeys(s.line for s in storms if s.line.startswith("drop ")))
    settings = tuple(dict.fromkeys(s.line for s in storms if s.line.startswith("config ")))
    if verify and drops:
        settings += (f"verify every {verify} calls",)
    reasons = [f"{s.guard} ({s.guard_type}): {s.verdict}, failed {s.failures} times" for s in storms if s.line]
    return PolicyText(name, body=drops, unsafe=bool(drops), settings=settings, default="", extends="watch_state",
                      doc="watch_state with the proven fixes of a recompile storm (python -m guardpolicy recompiles)",
                      header=("Written by `python -m guardpolicy recompiles`: each line fixes a storm", *reasons)
                      ).render()


def _outcome(p: loop.Pass, eager: loop.Pass) -> Outcome:
    from ...runtime.compiled import stats

    st = stats(p.compiled)
    wrong, wrong_state, first = loop.wrong_calls(p, eager)
    return Outcome(st.compiles, bool(st.eager_fallbacks), wrong, wrong_state, first, round(p.seconds, 3))


def _values(texts: list[str]) -> list:
    """The values a storm's cache entries were compiled for, as Python values where torch's
    text of them is a literal (``'req-3'``, ``7``, ``0.125``): the audit tries each."""
    import ast

    out = []
    for text in texts:
        try:
            out.append(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            continue
    return out


#: Strings of the model's code tried per string storm at most, and the long string tried (a
#: length check: ``if len(options["request_id"]) > 64``).
MAX_CODE_STRINGS = 8
LONG_STRING = "x" * 300


def _code_strings(model: Any, frames: set[str]) -> list[str]:
    """Short strings in the constants of the code that read the storms (``frames``: their
    ``"forward at FILE:LINE"``), among the ``forward`` of each submodule and a function model:
    what that code may compare a guarded string with (``"admin-"``)."""
    from ..mutation.values import code_strings

    codes = [type(m).forward.__code__ for m in _modules(model) if hasattr(type(m).forward, "__code__")]
    codes += [model.__code__] if hasattr(model, "__code__") else []
    return code_strings([c for c in codes if f"{c.co_name} at {c.co_filename}:{c.co_firstlineno}" in frames])


def _modules(model: Any) -> list:
    modules = getattr(model, "modules", None)
    return list(modules()) if callable(modules) else []


def _string_values(values: list, strings: list[str]) -> list:
    """For a storm of string values: the strings of the model's code, each also as a prefix of
    the first value seen (``"admin-" + "req-0"``), and a long string."""
    if not values or not all(isinstance(v, str) for v in values):
        return []
    picked = strings[:MAX_CODE_STRINGS]
    return [*picked, *(c + values[0] for c in picked), LONG_STRING]


def _same_type(mutation: str, kind: type | None) -> bool:
    """Whether a change ``"'req-0' -> 'xxx'"`` gave a value of the type the storm's values have
    (a value of another type fails a kept type guard: the compiled code would raise too)."""
    import ast

    new = mutation.partition(" -> ")[2].removesuffix(SEEN)
    if new[:1] in ("'", '"'):  # a string, perhaps shortened ("'xxx…")
        return kind is str
    try:
        return kind is not None and type(ast.literal_eval(new)) is kind
    except (ValueError, SyntaxError):
        return False


def _prove(storms: list[Storm], built: Any, backend: str, progress: Callable | None) -> dict:
    """The mutation audit of dropping every value-guard storm on the example call: its
    verdict and first detail per ``(guard, guard_type)``."""
    from ...api.loading import load
    from ..mutation.run import audit

    candidates = [s for s in storms if s.guard_type in VALUE_GUARDS]
    if not candidates:
        return {}
    drops = [Storm(s.guard, s.guard_type, s.frame) for s in candidates]
    for s in drops:
        from .verdicts import drop_line

        s.line = drop_line(s)
    policy = load(fix_policy("recompiles_candidate", drops))
    strings = _code_strings(built.fn, {s.frame for s in candidates})
    seen = {s.guard: _values(s.values) + _string_values(_values(s.values), strings) for s in candidates}
    result = audit(built.fn, built.args, built.kwargs, policy, label="recompiles", backend=backend,
                   progress=progress, seen=seen)
    kinds = {s.guard: type(v[0]) for s in candidates if (v := _values(s.values))}
    out = {}
    for group in result.groups:
        for g in group.dropped:
            verdict = group.verdict(g.guard_type)
            detail = next((t.detail for t in group.trials if t.outcome == verdict and g.guard_type in t.guard_types),
                          "")
            raised = next((t for t in group.trials if t.outcome == "not applied" and g.guard_type in t.guard_types
                           and t.detail.startswith("eager raised") and _same_type(t.mutation, kinds.get(group.name))),
                          None)
            if verdict == "harmless" and raised is not None:  # a check of the value: dropping it skips the check
                verdict, detail = "dangerous", (f"at {raised.mutation.removesuffix(SEEN)} {raised.detail}, which the compiled code, "
                                                f"its guard dropped, would not")
            out.setdefault((group.name, g.guard_type), (verdict, detail))
    return out


def _learn(storms: list[Storm], after: list[Storm], model: Any, backend: str, progress: Callable | None) -> bool:
    """What a run under the fix taught: a storm whose line did not stop it loses the line
    (a module int made a symbol that the graph specializes on again: ``tensor``), and storms
    the fix uncovered (torch names only the first failing guard of each entry) are added,
    classified. Whether anything changed."""
    known = {(s.frame, s.guard): s for s in storms}
    changed = False
    for a in after:
        s = known.get((a.frame, a.guard))
        if s is None:
            _classify([a], model, backend, progress)
            storms.append(a)
            changed = changed or bool(a.line)
        elif s.line:
            s.line, changed = "", True
            s.verdict = "tensor" if s.verdict == "config" else "keep"
            s.advice = (f"still storms under `{UNSPEC_INT}`: the graph specializes on it again (an index, a "
                        f"size); convert this integer into a tensor" if s.verdict == "tensor" else
                        "still storms with its guard dropped: keep it")
    return changed


def _classify(storms: list[Storm], model: Any, backend: str, progress: Callable | None) -> None:
    from ..common.timing.machine import give_back_freed_memory

    give_back_freed_memory()  # the last pass's compiles: the audit grows from what is in use
    proven = _prove(storms, model, backend, progress) if storms else {}
    give_back_freed_memory()  # the audit's trials: the next pass grows from what is in use
    for s in storms:
        classify(s, proven, model.fn)


def recompiles(build: Callable[[], Any], run: Callable, *, name: str = "fix", backend: str = "eager",
               verify: int | None = None, progress: Callable | None = None) -> RecompilesReport:
    """Runs the steps of the module docstring. ``build()`` returns a ``BuiltModel`` (a new
    model per call, the same weights under seed 0); ``run(compiled, model)`` is the loop;
    ``backend``: the compiles' backend (guards and recompiles do not depend on it; ``eager``
    is the fastest); ``verify``: the fix's ``verify every N calls`` (None: no verify line).
    Raises ``loop.LoopError`` when the loop raises."""
    from ...api.loading import load
    from ...runtime.compiled import compile as gp_compile, stats

    calls = {"n": 0}

    def tick() -> None:
        calls["n"] += 1
        if progress:
            progress(f"recompiles · {phase} · call {calls['n']}")

    phase = "eager"
    eager = loop.run_pass(run, build, None, tick, "in the eager pass")
    phase, calls["n"] = "watch_state", 0
    before = loop.run_pass(run, build, lambda m: gp_compile(m, "watch_state", backend=backend), tick,
                           "compiled with watch_state (eager ran it)")
    st = stats(before.compiled)
    storms = storms_of(st.recompiles, st.explanations)
    report = RecompilesReport(len(eager.outputs), failed(st.recompiles, st.explanations), storms,
                              before=_outcome(before, eager))
    del before, st  # the compiled model and its cache entries: not kept while the audit runs
    import torch

    torch.manual_seed(0)
    model = build()
    _classify(storms, model, backend, progress)
    ran = ""
    for _ in range(MAX_ROUNDS):
        text = fix_policy(name, storms, verify) if any(s.line for s in storms) else ""
        if not text or text == ran:
            break
        ran, policy = text, load(text)
        phase, calls["n"] = "fix", 0
        after = loop.run_pass(run, build, lambda m, p=policy: gp_compile(m, p, backend=backend), tick,
                              "compiled with the fix (eager ran it)")
        report.after = _outcome(after, eager)
        st = stats(after.compiled)
        report.recompiles += failed(st.recompiles, st.explanations)
        learned = storms_of(st.recompiles, st.explanations)
        del after, st
        if not _learn(storms, learned, model, backend, progress):
            break
    current = fix_policy(name, storms, verify) if any(s.line for s in storms) else ""
    report.policy = current
    if current != ran:  # what the loop last ran is not the fix: not proven
        report.after = None
    report.storms = sorted(storms, key=lambda s: (-s.failures, s.guard))
    return report


def report_of(compiled: Any) -> RecompilesReport:
    """The recompiles and storms of a live ``guardpolicy.compile`` object so far, each storm
    with the verdict that needs no run (``drop`` needs the audit: a value guard is ``keep``
    here until ``python -m guardpolicy recompiles`` proves its drop); ``before`` holds its
    compiles and whether it fell back to eager (``wrong`` is unknown: -1)."""
    from ...runtime.compiled import stats

    try:
        st = stats(compiled)
    except TypeError:
        raise TypeError(f"guardpolicy.recompiles() takes what guardpolicy.compile returned, "
                        f"not {type(compiled).__name__}") from None
    storms = storms_of(st.recompiles, st.explanations)
    model = getattr(compiled, "_orig_mod", compiled)
    for s in storms:
        classify(s, {}, model)
        if s.verdict == "keep":
            s.advice = ("not proven either way from a live object: `python -m guardpolicy recompiles` runs the "
                        "loop and proves whether dropping it is harmless")
    return RecompilesReport(st.call_count or 0, failed(st.recompiles, st.explanations), storms,
                            before=Outcome(st.counts.compiles, bool(st.eager_fallbacks), -1, -1), live=True)


__all__ = ["Outcome", "RecompilesReport", "UNSPEC_INT", "fix_policy", "recompiles", "report_of"]
