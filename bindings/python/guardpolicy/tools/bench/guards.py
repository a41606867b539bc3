"""The bench command's guard figures per compiled variant (each variant's cache entries found
by its tagged backend, ``rows.backend_tag``): the guard-manager trees' sizes
(``count_tree_guards``) and guard evaluation, cold (torch's ``profile_guard_manager``) and
warm (``root.check`` back to back). See ``guardpolicy.tools.bench`` (the module docstring)
for what each column means."""

from __future__ import annotations

import inspect
import statistics
import time
from typing import Any, Callable

from ...runtime import torch_internals
from .rows import Row, backend_tag


# --------------------------------------------------------------------------- guard trees


def tree_api_available() -> bool:
    """Whether torch exposes what ``count_tree_guards`` needs (checked, not assumed)."""
    return torch_internals.guard_tree_api()


def count_tree_guards(guard_manager) -> int:
    """Guards in one guard-manager tree (a count).

    ``guard_manager`` is a cache entry's ``GuardManagerWrapper`` (or a ``RootGuardManager``
    such as its ``diff_guard_root``). Walks ``get_child_managers()`` and dict key/value
    managers from the root and counts every leaf guard once (relational guards hang under
    several managers and are deduplicated by identity), plus the root's epilogue lambda
    guards (shape-env and aliasing lambdas).
    """
    root = getattr(guard_manager, "root", guard_manager)
    alive: list[Any] = []  # keep the wrappers alive so id() stays unique during the walk
    seen_managers: set[int] = set()
    seen_leaves: set[int] = set()
    pending = [root]
    while pending:
        manager = pending.pop()
        alive.append(manager)
        if id(manager) in seen_managers:
            continue
        seen_managers.add(id(manager))
        for leaf in manager.get_leaf_guards():
            alive.append(leaf)
            seen_leaves.add(id(leaf))
        pending.extend(manager.get_child_managers())
        if hasattr(manager, "get_key_value_managers"):
            for key_mgr, value_mgr in manager.get_key_value_managers().values():
                pending.extend(m for m in (key_mgr, value_mgr) if m is not None)
    epilogue = root.get_epilogue_lambda_guards() if hasattr(root, "get_epilogue_lambda_guards") else []
    return len(seen_leaves) + len(epilogue)


def code_owner(model) -> Callable:
    """What holds the compiled code object: ``type(model).forward`` for an ``nn.Module``,
    else the function itself."""
    import torch

    return type(model).forward if isinstance(model, torch.nn.Module) else model


def cache_entries(model) -> list:
    try:
        return torch_internals.cache_entries_of(code_owner(model))
    except Exception:  # a callable Dynamo cannot map to a code object
        return []


# --------------------------------------------------------------------------- guard evaluation


def profile_fn() -> Callable | None:
    """torch's guard-manager profiler where torch has it, else None."""
    return torch_internals.guard_profiler()


def frame_locals(model, inputs: tuple) -> dict[str, Any] | None:
    """The compiled frame's locals on entry: the forward's (or function's) parameters bound
    to ``inputs`` by name, defaults applied, plus its closure's free variables; None when
    the signature cannot be bound."""
    fn = code_owner(model)
    try:
        sig = inspect.signature(fn, follow_wrapped=False)  # the compiled code's own names
        bound = sig.bind(model, *inputs) if fn is not model else sig.bind(*inputs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    f_locals = dict(bound.arguments)
    # a decorated forward (transformers wraps many) is a closure: its frame sees the free
    # variables too, and Dynamo guards them as locals (L['func'])
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is not None and closure:
        try:
            f_locals.update((n, c.cell_contents) for n, c in zip(code.co_freevars, closure))
        except ValueError:  # an empty cell
            return None
    return f_locals


WARM_SAMPLES = 15  # samples of back-to-back root.check calls per variant
WARM_SAMPLE_S = 0.001  # about this long each


def _checks_per_sample(root, f_locals: dict) -> int:
    """How many back-to-back ``root.check`` calls last about ``WARM_SAMPLE_S``."""
    t0 = time.perf_counter_ns()
    for _ in range(3):
        root.check(f_locals)
    one = max((time.perf_counter_ns() - t0) / 3, 50)
    return max(1, min(20_000, int(WARM_SAMPLE_S * 1e9 / one)))


def _warm_sample_ns(root, f_locals: dict, number: int) -> float:
    """ns per ``root.check(f_locals)``, averaged over ``number`` back-to-back checks."""
    check = root.check
    t0 = time.perf_counter_ns()
    for _ in range(number):
        check(f_locals)
    return (time.perf_counter_ns() - t0) / number


def measure_guards(model, inputs, variants: list[Row], guard_iters: int, tree_api: bool) -> None:
    """Tree guard counts and guard-evaluation time per compiled variant (all compiled).

    Guard evaluation is sampled round-robin over the variants, as the calls are: per round
    and variant one ``profile_guard_manager(root, f_locals, 1)`` (the first ``guard_iters``
    rounds; torch evicts the caches before the check) and one sample of back-to-back
    ``root.check(f_locals)`` calls. The cold figure is the median of its samples (the
    eviction makes each one vary), the warm figure the best sample, as ``timeit`` advises
    for deterministic work on a shared machine."""
    profile = profile_fn() if guard_iters > 0 else None
    f_locals = frame_locals(model, inputs)
    entries = cache_entries(model) if tree_api else []
    timed: list[tuple[Row, Any, int]] = []
    for v in variants:
        if not v.compiled:
            continue
        own = [e for e in entries if backend_tag(e) == v.tag]
        # resume functions after a graph break live on other code objects: only complete trees
        if not own or v.frames is None or len(own) != v.frames:
            continue
        try:
            v.tree_guards = sum(count_tree_guards(e.guard_manager) for e in own)
            roots = [e.guard_manager.diff_guard_root if v.uses_diff_tree else e.guard_manager.root for e in own]
            if any(r is None for r in roots):
                v.problems.append("no diff guard tree for skip_guard_eval_unsafe")
                continue
            v.run_tree_guards = sum(count_tree_guards(r) for r in roots)
        except Exception as exc:  # an API shape we did not expect: omit, never guess
            v.problems.append(f"guard tree not countable: {exc!r}")
            continue
        if len(own) != 1 or f_locals is None or not roots[0].check(f_locals):
            continue  # several entries, or arguments Dynamo would not see as we bound them
        timed.append((v, roots[0], _checks_per_sample(roots[0], f_locals)))
    cold: dict[str, list[float]] = {v.name: [] for v, _, _ in timed}
    warm: dict[str, list[float]] = {v.name: [] for v, _, _ in timed}
    for r_i in range(max(WARM_SAMPLES, guard_iters)):
        for v, root, number in timed[r_i % max(len(timed), 1):] + timed[:r_i % max(len(timed), 1)]:
            if profile is not None and r_i < guard_iters:
                cold[v.name].append(float(profile(root, f_locals, 1)))
            if r_i < WARM_SAMPLES:
                warm[v.name].append(_warm_sample_ns(root, f_locals, number))
    for v, _, _ in timed:
        if cold[v.name]:
            v.guard_eval_us = statistics.median(cold[v.name])
        v.guard_check_us = min(warm[v.name]) / 1000.0  # deterministic work: noise only adds


