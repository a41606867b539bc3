"""Verify across ranks: the ``CallPath.agree`` of a compiled object (docs/distributed.md,
"Verify across ranks").

Every rank samples the same calls (the call count alone decides) and checks each one
locally; its verdict then passes through ``VerdictAgreement``. When the object agrees over a
group (``torch.distributed`` initialised, or ``process_group=``), the ranks meet in one
collective per sampled call: ``RankGroup.flagged``, an ``all_reduce`` of one number (how many
ranks saw a violation). None: the call goes on; that collective is all a sampled
call adds. Some: the ranks gather the violations (a second collective, on such calls only,
which every rank knows to enter) and every rank acts on all of them, each tagged with the
rank that saw it: under ``recompile`` every rank invalidates the entry it would serve, so
all ranks recompile on this call (never one alone); under ``raise`` every rank raises
``StaleGuardError`` naming the rank(s); under ``warn`` every rank warns.

What makes every rank reach the collective on the same call:

* the collective runs on every sampled call, whatever the local check found: no cache entry
  yet (the frame compiles on this call), an entry compiled without verify, or arguments
  that do not bind (the call then raises by itself, after the agreement);
* only the top-level frame is checked: one collective per sampled call, however many frames
  (graph-break resume frames) the call runs;
* a direct call (``dispatch="direct"``) that verify sends back to the normal path is checked
  again there under the same call number: that second check is not agreed again;
* the policy fingerprint is agreed first, at the first sampled call when it comes before the
  first compile (``verify=1`` checks call 1 before it compiles): ranks whose ``verify`` or
  ``on_violation`` differ fail there with ``RankMismatchError`` instead of pairing unlike
  collectives.

A rank that does not come (it made fewer calls, or failed before this one) makes the others
fail within ``rank_timeout`` with ``RankMismatchError``, which every later agreement of the
object raises again.
"""

from __future__ import annotations

import dataclasses
from typing import Any



class VerdictAgreement:
    """``CallPath.agree`` for one compiled object: ``stats`` is its ``CompileStats`` (the
    ``RankAgreement`` is ``stats.ranks``; the time of each collective is recorded there)."""

    __slots__ = ("stats", "_agreed")

    def __init__(self, stats: Any):
        self.stats = stats
        self._agreed = 0  # the last call number agreed on

    def __call__(self, verdict: Any) -> Any:
        """``verdict``: this rank's ``runtime.verify.Verdict``; returns it, or the same call's
        verdict with the violations every rank saw."""
        stats = self.stats
        ranks = stats.ranks
        ranks.before_compile(stats.policy, "first verified call")
        group = ranks.group
        if group is None or verdict.call == self._agreed:
            return verdict
        self._agreed = verdict.call
        if not ranks.flagged(verdict.stale, f"verified call {verdict.call}"):
            return verdict
        own = tuple(dataclasses.replace(v, rank=group.rank) for v in verdict.violations)
        seen = ranks.gather(own, f"the violations of verified call {verdict.call}")
        return dataclasses.replace(verdict, violations=tuple(v for violations in seen for v in violations))
