"""Many ranks, one policy: what ``guardpolicy.compile`` agrees on over a ``torch.distributed``
process group (docs/distributed.md).

Each compiled object has a ``RankAgreement`` (``guardpolicy.stats(opt).ranks``). At its first
compile (the first cache miss of its Dynamo callback, before anything is traced), when
``torch.distributed`` is initialised or ``process_group=`` was given, the ranks of the group
gather each other's policy ``Fingerprint``; a difference raises ``RankMismatchError`` on every
rank, naming the ranks and what differs. With ``check_ranks=True``, each compiled frame's
decisions are compared too (``FrameDigest``; on a difference, the decisions themselves).
With verify, the ranks also agree on each verified call (``guardpolicy.distributed.verdicts``, over
``RankGroup.flagged``); a dry-run report is gathered over the group (``guardpolicy.runtime.dry_run``).

Each agreement is two asynchronous ``all_gather``s (the sizes, then the pickled objects), each
waited for in short slices up to ``rank_timeout`` seconds on every rank
(``guardpolicy.distributed.collectives``): a rank that never compiles, or compiles a frame the others do
not (a recompile on one rank alone, whichever rank it is), fails with ``RankMismatchError``
within ``rank_timeout`` naming itself and the call instead of hanging in a collective, and
SIGINT ends a waiting rank within a fraction of a second. Once an agreement has failed, every
later compile of the object raises the same error with no collective: the ranks are out of
step, and a new collective could pair with another one. A rank that abandoned a collective
(timed out or interrupted) starts none on that group again, for any object: their agreements
raise ``RankMismatchError`` at once (``collectives.check_in_step``).
"""

from __future__ import annotations

import time
from typing import Any

from . import collectives
from ..api.errors import RankMismatchError
from .fingerprint import fingerprint, mismatch_report
from .frame_digest import decisions, differing, divergence_report, frame_digest
from ..api.policy import Policy

#: ``rank_timeout``'s default, in seconds: how long a rank waits at an agreement for the
#: others (a compile on one rank may take that much longer than on another).
DEFAULT_TIMEOUT_S = 300.0


_COMPILE_UNREACHED = ("a rank compiled nothing, or compiled a frame the others did not (a recompile "
                      "on some ranks only)")
_VERIFY_UNREACHED = ("a rank did not make this call of the compiled object (the ranks sample the same "
                     "call counts only when they call it equally often), or failed before it")


class RankGroup:
    """The process group an agreement runs over, with this process's global rank."""

    def __init__(self, group: Any, timeout_s: float):
        import torch.distributed as dist

        self._dist = dist
        self.group = group  # None: the default group
        self.rank = dist.get_rank()
        self.size = dist.get_world_size(group)
        self.timeout_s = timeout_s
        self._flags: Any = None  # flagged()'s tensor, made once

    def flagged(self, flag: bool, what: str = "a verified call") -> int:
        """How many ranks of the group pass ``flag=True``, once every rank has passed its
        own: one ``all_reduce`` (sum) of one int64. One element, not one per rank: gloo
        spreads a tensor over the ranks in chunks, and on 4 local ranks a 4-byte tensor took
        about 3x as long (bench/DETAILS.md). Which ranks they are is not needed here: when any
        flagged, the ranks gather their violations, each tagged with its rank. Raises
        ``RankMismatchError`` when a rank does not come within the timeout (the wait is
        bounded on every backend: the collective runs asynchronously and is waited for)."""
        flags = self._flags
        if flags is None:
            import torch

            flags = self._flags = torch.zeros(1, dtype=torch.int64)
        flags.fill_(1 if flag else 0)
        try:
            collectives.all_reduce_sum(self._dist, flags, self.group, self.timeout_s)
        except collectives.OutOfStep as e:
            raise self._not_started(what, e) from None
        except RuntimeError as e:
            raise self._unreached(what, e, _VERIFY_UNREACHED) from None
        return int(flags.item())

    def gather(self, obj: Any, what: str) -> list:
        """``obj`` of every rank of the group, in group order, once every rank has arrived.
        Raises ``RankMismatchError`` when a rank does not arrive within the timeout (gloo),
        the collective fails, or the group is out of step on this rank (no collective starts)."""
        try:
            return collectives.gather_objects(self._dist, obj, self.size, self.group, self.timeout_s)
        except collectives.OutOfStep as e:
            raise self._not_started(what, e) from None
        except RuntimeError as e:
            raise self._unreached(what, e) from None

    def _not_started(self, what: str, e: collectives.OutOfStep) -> RankMismatchError:
        return RankMismatchError(f"guardpolicy: no agreement on {what} started on rank {self.rank}: {e}",
                                 (self.rank,))

    def _unreached(self, what: str, e: BaseException, why: str = "") -> RankMismatchError:
        torch_says = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return RankMismatchError(
            f"guardpolicy: not every rank reached the agreement on {what} within "
            f"{self.timeout_s:g} s (rank_timeout), seen from rank {self.rank}: {why or _COMPILE_UNREACHED}; "
            f"torch: {torch_says}", (self.rank,))


def resolve_group(process_group: Any, timeout_s: float) -> RankGroup | None:
    """The group to agree over: ``process_group``, else the default group when
    ``torch.distributed`` is initialised; None when there is none or it has one rank."""
    import torch.distributed as dist

    if process_group is None and not (dist.is_available() and dist.is_initialized()):
        return None
    group = RankGroup(process_group, timeout_s)
    return group if group.size > 1 else None


def check_group(process_group: Any) -> None:
    """At ``guardpolicy.compile``: a given ``process_group`` needs ``torch.distributed``
    initialised and this rank in the group. Raises ValueError."""
    if process_group is None:
        return
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("guardpolicy.compile: process_group= needs torch.distributed initialised "
                         "(torch.distributed.init_process_group) first")
    if dist.get_rank(process_group) < 0:
        raise ValueError(f"guardpolicy.compile: rank {dist.get_rank()} is not in process_group")


class RankAgreement:
    """One compiled object's agreement across ranks (see the module docstring). ``settings``:
    ``guardpolicy.compile``'s keywords that change what a call does (compared as part of the
    fingerprint). A deep copy keeps the group; a pickled one agrees over the default group
    (a process group cannot travel). Either agrees again at its first compile."""

    __slots__ = ("process_group", "check_frames", "timeout_s", "settings", "_group", "_resolved", "error",
                 "verify_agreements", "verify_agreement_s")

    def __init__(self, process_group: Any = None, check_frames: bool = False,
                 timeout_s: float = DEFAULT_TIMEOUT_S, settings: dict[str, Any] | None = None):
        self.process_group = process_group
        self.check_frames = check_frames
        self.timeout_s = timeout_s
        self.settings = dict(settings or {})
        self._group: RankGroup | None = None
        self._resolved = False
        self.error: RankMismatchError | None = None  # the failed agreement, raised again
        self.verify_agreements = 0  # verified calls agreed on (guardpolicy.distributed.verdicts)
        self.verify_agreement_s = 0.0  # the time spent in their collectives, in seconds

    @property
    def group(self) -> RankGroup | None:
        """The group agreed over; None before the first compile or without one."""
        return self._group

    @property
    def verify_agreement_us(self) -> float | None:
        """The mean time of one verified call's agreement, in µs (None before the first)."""
        return self.verify_agreement_s / self.verify_agreements * 1e6 if self.verify_agreements else None

    def before_compile(self, policy: Policy, when: str = "first compile") -> None:
        """On every cache miss, and on every verified call: the first of them gathers the
        fingerprints (``when`` says which it is). Raises ``RankMismatchError`` (again, after a
        failed agreement)."""
        if self.error is not None:
            raise self.error
        if self._resolved:
            return
        self._resolved = True
        self._group = resolve_group(self.process_group, self.timeout_s)
        if self._group is None:
            return
        prints = self.gather(fingerprint(policy, self._group.rank, self.settings),
                              f"the policy `{policy.name}` ({when})")
        if (found := mismatch_report(prints)) is not None:
            self.fail(RankMismatchError(*found))

    def after_frame(self, explanations: Any, call: int | None = None) -> None:
        """In ``guard_filter_fn``, with ``check_ranks``: compares this frame's decisions
        (``explanations``, its ``runtime.frames.FrameExplanations``) across ranks (``call``: the object's call that compiles it, when counted). Raises
        ``RankMismatchError``."""
        if self.error is not None:
            raise self.error
        if not self.check_frames or self._group is None:
            return
        what = f"frame {explanations.frame}" + (f" on call {call}" if call is not None else "")
        digests = self.gather(frame_digest(explanations, self._group.rank), what)
        if not (ranks := differing(digests)):
            return
        lists = self.gather(decisions(explanations), what)
        self.fail(RankMismatchError(divergence_report(digests, lists), tuple(ranks)))

    @property
    def rank(self) -> int | None:
        """This process's global rank in the agreed group; None without one."""
        return self._group.rank if self._group is not None else None

    def report_group(self) -> RankGroup | None:
        """The group a dry-run report is gathered over: the agreed one, or before the first
        compile the one it would agree over (nothing is agreed)."""
        return self._group if self._resolved else resolve_group(self.process_group, self.timeout_s)

    def rank_at_exit(self) -> int | None:
        """This process's rank, for a report written at exit (None: one process, or
        ``torch.distributed`` gone before the first compile)."""
        try:
            group = self.report_group()
        except (RuntimeError, ValueError):  # the process group was destroyed
            return None
        return group.rank if group is not None else None

    def gather(self, obj: Any, what: str, group: RankGroup | None = None) -> list:
        """``RankGroup.gather`` over ``group`` (default: the agreed group); a failure is this
        object's error."""
        try:
            return (group or self._group).gather(obj, what)
        except RankMismatchError as e:
            self.fail(e)

    def flagged(self, flag: bool, what: str) -> int:
        """``RankGroup.flagged`` over the agreed group, timed (``verify_agreements``,
        ``verify_agreement_s``); a failure is this object's error."""
        start = time.perf_counter()
        try:
            flagged = self._group.flagged(flag, what)
        except RankMismatchError as e:
            self.fail(e)
        self.verify_agreement_s += time.perf_counter() - start
        self.verify_agreements += 1
        return flagged

    def fail(self, error: RankMismatchError) -> None:
        """Records ``error`` as this object's (raised again by every later agreement), raises it."""
        self.error = error
        raise error

    def __deepcopy__(self, memo: dict) -> RankAgreement:
        """A copy in this process keeps the group; it agrees again at its first compile."""
        return RankAgreement(self.process_group, self.check_frames, self.timeout_s, self.settings)

    def __getstate__(self) -> dict[str, Any]:
        return {"check_frames": self.check_frames, "timeout_s": self.timeout_s, "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(None, **state)

    def __repr__(self) -> str:
        where = "not resolved" if not self._resolved else (
            "no group" if self._group is None else f"rank {self._group.rank} of {self._group.size}")
        return f"<guardpolicy.RankAgreement {where}{', check_ranks' if self.check_frames else ''}>"
