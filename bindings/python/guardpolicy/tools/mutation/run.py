"""The guard-driven mutation audit: which of the guards a policy drops matter for a model.

For one model (any callable and its example inputs) and one policy:

1. compile it with the policy (``guardpolicy.compile``, so its ``config`` and ``stance``
   lines apply) and call it once under ``torch.no_grad()``; while torch offers the guards,
   record per guard its name, type, the policy's decision and deciding rule, and torch's own
   source object (``orig_guard.originating_source``), with the frame's scope (Dynamo's
   ``output_graph.local_scope``/``global_scope``: what torch's guard builder reads);
2. group the guards by the state they protect (the same source name in the same frame) and,
   for every group with a dropped guard, resolve the guarded value with torch's own
   ``Source.get_value`` on that scope;
3. per group, change that state one way at a time, the way the group's guards would notice
   (``plan_mutations``: a number changed, a bool flipped, a string changed, None <-> a
   value, a dict entry added or changed, a list grown, a module's class swapped for a
   subclass whose forward changes its output, a function rebound to one that changes its
   result, a forward hook added; a list grown or shrunk; tensors: dtype, shape,
   ``requires_grad``), compute eager's output on the changed state and what the call wrote
   (``written``: attributes, buffers, dict entries, lists, guarded globals, closure cells,
   by value), call the compiled object from the same state, record what it wrote, and undo
   the change (checked: the eager output after undoing equals the first one);
4. classify each change: **dangerous** (no recompile, and the output or the written state
   differs from eager's, e.g. ``self.step += 1`` replayed as the constant Dynamo traced, or
   the stale code raised), **caught** (a kept guard failed: Dynamo compiled again, or the
   stance refused to), **harmless** (no recompile, output and written state equal to eager's), or not
   applied (the value cannot be changed that way, or eager itself cannot run the changed
   state); a group is dangerous when one of its changes is, else caught, else harmless, else
   **not mutated** with the reasons.

The compiled object is reused for every change (a change a kept guard catches adds a cache
entry; ``recompile_limit`` is raised for the run so that torch never falls back to eager).
Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from typing import Any, Callable

from ...api.policy import Policy
from ...api.policy_text import PolicyText
from ..common.compare import compare
from .plan import SEEN, Mutation, perturb, plan_mutations  # noqa: F401 - perturb: part of the API
from .calls import AuditStateError, NotRepeatableError, Session  # noqa: F401
from .trial_size import TrialTooLarge
from . import written
from .results import LEGEND, OUTCOMES, GroupResult, MutationAudit, Trial, format_audit  # noqa: F401
from .record import Call, NotMutable, RecordedFrame, RecordedGuard, GuardRecorder, read  # noqa: F401

_REFUSED_RECOMPILE = ("Recompilation triggered with skip_guard_eval_unsafe stance",
                      "Detected recompile when torch.compile stance is 'fail_on_recompile'")

#: Guard types that guard no value a change could alter (ambient state, relations between
#: values, imports): never mutated, always reported.
_RELATIONAL = {"DUPLICATE_INPUT", "NO_TENSOR_ALIASING", "OBJECT_ALIASING", "WEAKREF_ALIVE",
               "TENSOR_SUBCLASS_METADATA_MATCH", "STORAGE_OVERLAPPING"}

# --------------------------------------------------------------------------- comparing


def _short(e: BaseException, limit: int = 140) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- the audit


def _groups(rec: GuardRecorder, only_dropped: bool = True) -> list[GroupResult]:
    """The recorded guards grouped by state (source name and frame; an ambient guard is
    its own group), in offer order; only the groups with a dropped guard by default."""
    by_key: dict[tuple, GroupResult] = {}
    for g in rec.guards:
        key = (g.frame, g.name) if g.name else (g.frame, "", g.guard_type)
        if key not in by_key:
            by_key[key] = GroupResult(g.name, g.frame, [])
        by_key[key].guards.append(g)
    return [grp for grp in by_key.values() if grp.dropped or not only_dropped]


def _is_root(group: GroupResult, rec: GuardRecorder, call: Call) -> bool:
    frame = rec.frames[group.frame]
    return group.frame == 0 and (frame.code is None or frame.code is call.code)


def plan(fn: Any, args: tuple = (), kwargs: dict | None = None) -> tuple[Call, list[tuple[str, list[str], Mutation]]]:
    """Every change the audit would make on ``fn(*args, **kwargs)``, without classifying
    any: ``(call, [(state, guard types that notice it, Mutation), ...])``. Compiles once
    (eager backend, every guard kept) to read the guards and their scopes. ``call`` holds
    the inputs a change of an input rebinds; apply each ``Mutation`` (it returns its undo)
    and run ``call.run(target)`` to see its effect, e.g. on a compiled object of your own."""
    import torch

    from ...api.loading import load
    from ...runtime.compiled import compile as gp_compile

    rec = GuardRecorder(load(PolicyText("keep_every_guard").render()))
    call = Call(fn, args, dict(kwargs or {}))
    session = Session(call)
    torch.compiler.reset()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session.run(gp_compile(fn, rec.policy, backend="eager"))
    finally:
        session.restore()
        torch.compiler.reset()
    rec.recording = False
    constants = model_constants(rec, fn)
    out = []
    for group in _groups(rec, only_dropped=False):
        if not group.name or not group.guards[0].has_value:
            continue
        frame = rec.frames[group.frame]
        try:
            value = read(group.guards[0].source, frame)
        except Exception:  # noqa: BLE001 - not readable: nothing to change
            continue
        mutations, _ = plan_mutations(group.guards, value, frame, call, _is_root(group, rec, call), constants)
        out += [(group.name, sorted(m.guard_types), m) for m in mutations]
    return call, out


def _plan_group(group: GroupResult, rec: GuardRecorder, session: Session,
                seen: dict[str, list] | None = None) -> list[Mutation]:
    """Every change planned for ``group`` (from the snapshot state); none, with the reason in
    ``group.reasons``, for ambient state, relations and values that cannot be read.
    ``seen``: per guard name, values a run gave that state (tried too, ``plan.SEEN``)."""
    frame = rec.frames[group.frame]
    first = group.guards[0]
    if not group.name or not first.has_value:
        group.reasons.append(f"ambient state ({', '.join(sorted({g.guard_type for g in group.guards}))}): "
                             f"no value to change")
        return []
    if {g.guard_type for g in group.guards} <= _RELATIONAL:
        group.reasons.append("a relation between values (aliasing, duplicate input): not changed")
        return []
    try:
        value = read(first.source, frame)
    except Exception as e:  # noqa: BLE001 - reported as the reason
        group.reasons.append(f"cannot read it: {_short(e)}")
        return []
    mutations, reasons = plan_mutations(group.guards, value, frame, session.call,
                                        _is_root(group, rec, session.call), session.constants,
                                        (seen or {}).get(group.name, ()))
    group.reasons.extend(reasons)
    return mutations


def _audit_group(group: GroupResult, mutations: list[Mutation], rec: GuardRecorder, session: Session,
                 compiled: Any, tick: Callable[[int], None], deadline: float | None = None) -> None:
    """Tries every planned change of ``group``, each from the snapshot state; stops early
    once every dropped guard type of the group is dangerous (no later value can clear it), or
    when ``deadline`` (``time.perf_counter()``) has passed (``group.cut``: kept). ``tick(n)``:
    ``n`` more planned changes done or skipped."""
    applied_none_value = False
    for i, m in enumerate(mutations):
        if deadline is not None and time.perf_counter() > deadline:
            group.cut = len(mutations) - i
            tick(group.cut)
            return
        tick(1)
        if applied_none_value and m.what.startswith("None -> ") and not m.what.endswith(SEEN):
            continue  # None -> a value: one candidate that eager runs is enough (a run's values: each)
        trial = _one_trial(m, rec, session, compiled)
        trial.guard_types = sorted(m.guard_types)
        group.trials.append(trial)
        if trial.outcome != "not applied" and m.what.startswith("None -> "):
            applied_none_value = True
        left = mutations[i + 1:]
        if group.dropped and all(group.verdict(g.guard_type) == "dangerous" for g in group.dropped) and not any(
                m2.what.startswith(RESHAPED) for m2 in left):
            group.stopped_early = len(left)
            tick(len(left))
            return


#: How a module of the same class with other shapes is described (``mutation_values``).
RESHAPED = "same class "


def propagate_reshapes(groups: list[GroupResult]) -> None:
    """A module swapped for one of the same class with other shapes (a LoRA adapter of
    another rank) changes the tensors under it consistently, which no change of one tensor
    can: its outcome counts for the ``TENSOR_MATCH`` guards of the tensors under that module
    too (so a shape-specialised kernel that raised keeps them)."""
    for g in groups:
        for t in [t for t in g.trials if t.mutation.startswith(RESHAPED) and t.outcome != "not applied"]:
            for h in groups:
                under = h.name.startswith(g.name) and h.name[len(g.name):len(g.name) + 1] in (".", "[")
                if h is not g and h.frame == g.frame and under and any(
                        x.guard_type == "TENSOR_MATCH" for x in h.guards):
                    h.trials.append(Trial(f"{t.mutation} (the module {g.name})", t.outcome, t.detail,
                                          ["TENSOR_MATCH"]))


def _one_trial(m: Mutation, rec: GuardRecorder, session: Session, compiled: Any) -> Trial:
    """One change, from the snapshot state: eager's output on the changed state and what it
    wrote (``written.capture``), the state restored (with the change), the compiled call and
    what it wrote, then the change undone and everything restored. Dangerous when the
    compiled call returned or wrote otherwise than eager (``written.differ``)."""
    try:
        undo = m.apply()
    except NotMutable as e:
        return Trial(m.what, "not applied", str(e))
    except Exception as e:  # noqa: BLE001
        return Trial(m.what, "not applied", f"the change raised {_short(e)}")
    try:
        changed = session.snapshot()
        try:
            ref = session.run_bounded(session.call.fn)
        except TrialTooLarge as e:
            return Trial(m.what, "not applied", f"too large to try: {e}")
        except Exception as e:  # noqa: BLE001 - eager cannot run it: no valid state to audit
            return Trial(m.what, "not applied", f"eager raised {_short(e)}")
        eager_wrote = session.wrote(changed)
        session.restore(changed)
        before = rec.compiles
        error = None
        out = None
        try:
            out = session.run(compiled)
        except Exception as e:  # noqa: BLE001 - stale code may crash on the new state
            error = e
        if error is not None and any(s in str(error) for s in _REFUSED_RECOMPILE):
            return Trial(m.what, "caught", "a kept guard failed; the stance refused to recompile")
        if rec.compiles > before:
            return Trial(m.what, "caught", "a kept guard failed: recompiled")
        if error is not None:
            return Trial(m.what, "dangerous", f"no recompile, and the compiled code raised {_short(error)}")
        problem = compare(out, ref)
        if problem is not None:
            return Trial(m.what, "dangerous", f"no recompile, stale output: {problem}")
        stale = written.differ(eager_wrote, session.wrote(changed), session.unjudged, session.state_name)
        if stale is not None:
            return Trial(m.what, "dangerous", f"no recompile, stale state: {stale}")
        return Trial(m.what, "harmless", "no recompile, output and written state equal eager's")
    finally:
        try:
            undo()
        finally:
            session.restore()


@contextlib.contextmanager
def _logger_at(logger: logging.Logger, level: int):
    old = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(old)


def model_constants(rec: GuardRecorder, fn: Any) -> tuple:
    """The numbers a guarded value may be compared with: the constants of the compiled
    frames' code and of every submodule's ``forward`` (``mutation_values.code_constants``),
    and the other guarded numbers (a threshold kept as an attribute)."""
    import torch

    from .values import code_constants

    codes = [f.code for f in rec.frames if f.code is not None]
    if isinstance(fn, torch.nn.Module):
        codes += [type(m).forward.__code__ for m in fn.modules() if hasattr(type(m).forward, "__code__")]
    elif hasattr(fn, "__code__"):
        codes.append(fn.__code__)
    guarded = set()
    for g in rec.guards:
        if g.guard_type in ("CONSTANT_MATCH", "EQUALS_MATCH") and g.has_value:
            try:
                v = read(g.source, rec.frames[g.frame])
            except Exception:  # noqa: BLE001 - unreadable: not a candidate
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e9:
                guarded.add(v)
    return tuple(sorted(set(code_constants(codes)) | guarded))


def _guarded_globals(rec: GuardRecorder) -> dict[int, list[str]]:
    """Per recorded frame, the module globals its guards read (``G['CONFIG']...``)."""
    out: dict[int, list[str]] = {}
    for g in rec.guards:
        root = getattr(g.source, "global_name", None)
        src = g.source
        while root is None and getattr(src, "base", None) is not None:
            src = src.base
            root = getattr(src, "global_name", None)
        if root is not None and root in rec.frames[g.frame].global_scope:
            out.setdefault(g.frame, [])
            if root not in out[g.frame]:
                out[g.frame].append(root)
    return out


def audit(fn: Any, args: tuple = (), kwargs: dict | None = None, policy: Policy | str = "skip_all_guards", *,
          label: str = "model", policy_label: str | None = None, backend: str = "eager",
          verify: int | None = None, progress: Callable[[str], None] | None = None,
          budget: float | None = None, seen: dict[str, list] | None = None) -> MutationAudit:
    """Runs the mutation audit of ``policy`` (a ``Policy``, a std policy name or a file) on
    ``fn(*args, **kwargs)`` (see the module docstring) and returns a ``MutationAudit``.
    ``verify=N``: compiled with ``verify=N, on_violation="recompile"`` (docs/verify.md), so a
    change verify notices on the first call after it (N=1) recompiles and counts as caught;
    the violations the audit's own changes cause are recorded, not logged (the ``guardpolicy``
    logger is raised to ERROR meanwhile). ``budget``: seconds from the start (compile included)
    after which no further change is tried; a group not finished then is kept (``GroupResult.cut``:
    verdict "not mutated" unless a change already showed it dangerous or caught). ``seen``:
    per guard name (as torch names it: ``transformer_options['run_id']``), values a real run
    gave that state (numbers, strings, None, tuples of them): each is tried as well, its
    change marked ``plan.SEEN`` (``suggest --from-run`` drops a guard that failed in the run
    only when these were harmless).

    The caller's model and inputs are left as they were: every call runs from a snapshot of
    them under a fixed seed (``mutation_calls``), and the audit ends by checking that state and
    eager's output against the snapshot. Raises ``NotRepeatableError`` when two eager calls
    from the same state differ, ``AuditStateError`` when the final check fails; on any
    exception, Ctrl-C included, the state is restored first."""
    import torch

    from ...runtime.torch_internals import config_patch, inductor_fallback_random
    from ...api.loading import STD_POLICIES, load, load_std

    source = policy if isinstance(policy, str) else getattr(policy, "source_file", "")
    if isinstance(policy, str):
        policy = load_std(policy) if policy in STD_POLICIES else load(policy)
    result = MutationAudit(label, policy_label or policy.name, str(source), backend)
    rec = GuardRecorder(policy)
    session = Session(Call(fn, args, dict(kwargs or {})))
    torch.compiler.reset()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small calls, many of them: one thread is steadier and faster on a busy machine
    quiet = _logger_at(logging.getLogger("guardpolicy"), logging.ERROR) if verify else contextlib.nullcontext()
    try:
        with quiet, inductor_fallback_random(), config_patch(
                recompile_limit=1 << 20, accumulated_recompile_limit=1 << 20), torch.no_grad(), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _run(result, rec, session, policy, backend, verify, label, progress, budget, seen)
    finally:
        rec.frames = []  # the scopes hold the model's objects: let them go
        try:
            session.restore()
        finally:
            torch.compiler.reset()
            torch.set_num_threads(threads)
    return result


def _run(result: MutationAudit, rec: GuardRecorder, session: Session, policy: Policy, backend: str,
         verify: int | None, label: str, progress: Callable[[str], None] | None, budget: float | None,
         seen: dict[str, list] | None = None) -> None:
    deadline = None if budget is None else time.perf_counter() + budget
    from ...runtime.compiled import compile as gp_compile

    baseline = session.check_repeatable()
    checked = {"verify": verify, "on_violation": "recompile"} if verify else {}
    compiled = gp_compile(session.call.fn, rec.policy, backend=backend, **checked)
    t0 = time.perf_counter()
    first = session.run(compiled)
    result.compile_s = time.perf_counter() - t0
    session.restore()
    session.run(compiled)  # what a call writes without compiling (a compile marks the module: _is_torch_compile)
    stale = written.differ(session.eager_wrote, session.wrote(session.base), session.unjudged, session.state_name)
    session.restore()
    for _ in range(policy.stance_warmup or 0):
        session.run(compiled)
        session.restore()
    rec.recording = False
    session.constants = model_constants(rec, session.call.fn)
    for index, names in _guarded_globals(rec).items():
        session.add_globals(rec.frames[index].global_scope, names)
    problem = compare(first, baseline)
    if problem:
        result.problems.append(f"the compiled model differs from eager before any change: {problem}")
    elif stale:
        result.problems.append(f"the compiled model writes other state than eager before any change: {stale}")
    result.frames = len(rec.frames)
    result.offered = len(rec.guards)
    result.dropped = sum(1 for g in rec.guards if not g.keep)
    result.groups = _groups(rec)
    for group in result.groups:
        group.root = _is_root(group, rec, session.call)
    compiles = rec.compiles
    t0 = time.perf_counter()
    plans = [(group, _plan_group(group, rec, session, seen)) for group in result.groups]
    result.planned = sum(len(m) for _, m in plans)
    if progress:
        progress(f"{label} · {result.policy}: {len(plans)} states, {result.planned} changes to try, each one call "
                 "of eager and one of the compiled model (a change a kept guard catches compiles again)")
    done = 0
    for group, mutations in plans:
        def tick(n: int, state: str = group.name or "<ambient>") -> None:
            nonlocal done
            done += n
            if progress:
                progress(f"{label} · {result.policy} · {done}/{result.planned} {state}")

        _audit_group(group, mutations, rec, session, compiled, tick, deadline)
    cut = [g for g in result.groups if g.cut]
    if cut:
        result.budget_cut = sum(g.cut for g in cut)
        for g in cut:
            g.reasons.append(f"not finished: the --budget of {budget:g} s was spent ({g.cut} changes not tried)")
    propagate_reshapes(result.groups)
    result.audit_s = time.perf_counter() - t0
    result.recompiles = rec.compiles - compiles
    session.finish(baseline)
    result.state_s, result.restores = session.state_s, session.restores

