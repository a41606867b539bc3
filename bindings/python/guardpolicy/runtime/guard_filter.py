"""The two objects ``guardpolicy.compile`` gives torch: the ``guard_filter_fn``
(``GuardFilter``: the policy's decisions, recorded per compiled frame, checked across ranks,
indexed for verify and the dry run) and Dynamo's callback with the policy's config lines in
force (``ScopedConfigCallback``, which also attaches each new cache entry's watch gate,
``guardpolicy.runtime.watch``, and records a frame torch stopped compiling). Both run at compile time only, so they import
``torch_internals`` (and torch) where they use it: ``import guardpolicy`` imports neither."""

from __future__ import annotations

import warnings
from typing import Any, Callable

from . import logs, watch
from .watch import free_tensors
from ..api.errors import PolicyRuntimeWarning
from .dry_run import attribute
from .frames import EagerFallback, FrameExplanations, code_frame, compiled_frame
from .recompiles import Recompile, most_failed
from .logs import log as _log
from .serving import scope as serving_scope
from .stats import CompileStats
from .verify import DroppedIndex, FrameGuards


class GuardFilter:
    """The ``guard_filter_fn`` that ``guardpolicy.compile`` passes: the policy's decisions,
    and per compiled frame an explanation recorded in ``stats`` (compile time only: it
    costs a second pass over the entries). Picklable."""

    def __init__(self, stats: CompileStats):
        self.stats = stats

    def __call__(self, entries) -> list[bool]:
        from . import torch_internals

        stats = self.stats
        policy = stats.policy
        decisions = policy(entries)
        with warnings.catch_warnings():  # the first pass warned already, if at all
            warnings.simplefilter("ignore", PolicyRuntimeWarning)
            explanations = FrameExplanations(policy.explain(entries), compiled_frame())
        if not stats.dry_run and any(exp.watched for exp in explanations):
            torch_locals = torch_internals.compiling_frame_locals()
            decisions = list(decisions)  # the guards watched leave torch's manager
            stats.watches.add(torch_locals["self"], watch.plan(entries, explanations, torch_locals, decisions))
            if why := free_tensors.unseen(entries, explanations, torch_locals.get("f_code")):
                stats.watches.retire(torch_locals["self"], why)
        stats.record_compile(explanations)
        logs.frame_decided(policy.name, explanations, explanations.frame)  # TORCH_LOGS, TORCH_TRACE
        stats.ranks.after_frame(explanations, stats.calls)  # check_ranks: raises RankMismatchError
        if stats.verify_every:
            torch_locals = torch_internals.compiling_frame_locals()
            stats.guards.add(torch_locals["self"], FrameGuards.for_verify(entries, explanations, torch_locals,
                                                                          policy, torch_internals))
        elif stats.dry_run:
            decisions = self._dry_run(entries, decisions, explanations)
        torch_internals.forget_export_info([entry.orig_guard for entry in entries])  # torch builds them again
        return decisions

    def _dry_run(self, entries, decisions: list[bool], explanations: FrameExplanations) -> list[bool]:
        """Dry-run: attributes this compile if the policy would have served stale instead,
        builds the manager the policy would have kept (torch's builder) and keeps all."""
        from . import torch_internals

        stats = self.stats
        torch_locals = torch_internals.compiling_frame_locals()
        event = attribute(stats.guards, torch_locals, explanations.frame, torch_internals, stats.ranks.rank)
        if event is not None:
            stats.dry_run_events.append(event)
            _log.warning("guardpolicy dry-run: %s", event)
        kept = [entry.orig_guard for entry, keep in zip(entries, decisions) if keep]
        policy_manager = torch_internals.build_guard_manager(torch_locals["self"], kept, torch_locals, stats.policy)
        index = DroppedIndex.of(entries, explanations, explanations.frame)
        stats.guards.add(torch_locals["self"], FrameGuards(None, index, policy_manager))
        return [True] * len(entries)


class ScopedConfigCallback:
    """Dynamo's callback of one compiled object, run with the policy's config knobs patched
    and Dynamo's compile lock held (so no other thread compiles under them). Only a cache
    miss calls it. It carries the wrapped callback's ``_torchdynamo_orig_backend``, which
    Dynamo's C side reads to pick the cache entries of a backend.

    Before anything compiles, the first call agrees on the policy across ``torch.distributed``
    ranks (``RankAgreement.before_compile``). A ``RankMismatchError`` raised inside the
    compile (``check_ranks``), which Dynamo wraps as an ``InternalTorchDynamoError``, comes
    out as itself.

    When torch refuses to compile a frame at its recompile limit (it returns the RUN_ONLY
    strategy: the frame runs eagerly on every cache miss from then on, and this callback is
    not called for it again), the frame is recorded in ``stats.eager_fallbacks`` and logged."""

    def __init__(self, inner: Callable, stats: CompileStats):
        self.inner = inner
        self.stats = stats
        self._torchdynamo_orig_backend = inner._torchdynamo_orig_backend

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from . import torch_internals

        if serving_scope.THREAD.__dict__:  # this thread serves (guardpolicy.serving): refuse or count a compile
            serving_scope.on_miss(self.stats, self, args)
        ranks = self.stats.ranks
        with torch_internals.compile_lock():
            ranks.before_compile(self.stats.policy)
            try:
                frame = args[0] if args else None
                code = getattr(frame, "f_code", None)
                failed_before = len(torch_internals.guard_failures(code))
                with torch_internals.dynamo_config().patch(**self.stats.config_for(frame)):
                    result = self.inner(*args, **kwargs)
                    hit = torch_internals.recompile_limit_hit(result)  # the limit in force for the compile
                self._recompiled(code, failed_before, hit)
                if hit is not None:
                    fell_back = code_frame(code, hit["compile_id"])
                    self.stats.record_eager_fallback(EagerFallback(fell_back, hit["limit"], hit["value"],
                                                                   hit["last_reason"], self._most_failed(code)))
                return result
            except Exception:
                if ranks.error is not None:
                    raise ranks.error from None
                raise
            finally:  # the frames compiled have their cache entries: their gates go on
                self.stats.watches.attach()

    def _most_failed(self, code: Any) -> str:
        found = most_failed(self.stats.recompiles, self.stats.explanations, getattr(code, "co_name", ""),
                            getattr(code, "co_filename", ""))
        return f"{found[0]} failed {found[1]} times" if found else ""

    def _recompiled(self, code: Any, failed_before: int, hit: dict | None) -> None:
        """Files the recompile of ``code`` that just ran (torch's reasons appended since
        ``failed_before``), if it was one."""
        from . import torch_internals

        failures = torch_internals.guard_failures(code)[failed_before:]
        if not failures:
            return
        last = self.stats.explanations[-1].frame if self.stats.explanations else None
        compiled = "" if hit is not None or last is None or last.function != getattr(code, "co_name", None) \
            else last.compile_id
        self.stats.registries.recompiles.append(
            Recompile(code_frame(code, compiled), tuple(f.split("\n", 1)[0] for f in failures)))
