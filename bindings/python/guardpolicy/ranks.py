"""Many ranks, one policy: what ``guardpolicy.compile`` agrees on over a ``torch.distributed``
process group (docs/distributed.md).

Each compiled object has a ``RankAgreement`` (``guardpolicy.stats(opt).ranks``). At its first
compile (the first cache miss of its Dynamo callback, before anything is traced), when
``torch.distributed`` is initialised or ``process_group=`` was given, the ranks of the group
gather each other's policy ``Fingerprint``; a difference raises ``RankMismatchError`` on every
rank, naming the ranks and what differs. With ``check_ranks=True``, each compiled frame's
decisions are compared too (``FrameDigest``; on a difference, the decisions themselves).

Each agreement is one gloo ``monitored_barrier`` (which names the ranks that did not arrive
within ``rank_timeout`` seconds) and one ``all_gather_object``: a rank that never compiles, or
compiles a frame the others do not, makes the others fail within ``rank_timeout`` instead of
hanging in a collective. (Other backends have no monitored barrier: there the gather waits up
to the group's own timeout.) Once an agreement has failed, every later compile of the object
raises the same error with no collective: the ranks are out of step, and a new collective
could pair with another one.
"""

from __future__ import annotations

import datetime
from typing import Any

from .errors import RankMismatchError
from .fingerprint import fingerprint, mismatch_report
from .frame_digest import decisions, differing, divergence_report, frame_digest
from .frames import FrameExplanations
from .policy import Policy

#: ``rank_timeout``'s default, in seconds: how long a rank waits at an agreement for the
#: others (a compile on one rank may take that much longer than on another).
DEFAULT_TIMEOUT_S = 300.0


class RankGroup:
    """The process group an agreement runs over, with this process's global rank."""

    def __init__(self, group: Any, timeout_s: float):
        import torch.distributed as dist

        self._dist = dist
        self.group = group  # None: the default group
        self.rank = dist.get_rank()
        self.size = dist.get_world_size(group)
        self.timeout_s = timeout_s
        self._monitored = dist.get_backend(group) == "gloo"

    def gather(self, obj: Any, what: str) -> list:
        """``obj`` of every rank of the group, in group order, once every rank has arrived.
        Raises ``RankMismatchError`` when a rank does not arrive within the timeout (gloo)
        or the collective fails."""
        try:
            if self._monitored:
                self._dist.monitored_barrier(self.group, timeout=datetime.timedelta(seconds=self.timeout_s),
                                             wait_all_ranks=True)
            out: list = [None] * self.size
            self._dist.all_gather_object(out, obj, group=self.group)
            return out
        except RuntimeError as e:
            raise self._unreached(what, e) from None

    def _unreached(self, what: str, e: BaseException) -> RankMismatchError:
        torch_says = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return RankMismatchError(
            f"guardpolicy: not every rank reached the agreement on {what} within "
            f"{self.timeout_s:g} s (rank_timeout), seen from rank {self.rank}: a rank compiled "
            f"nothing, or compiled a frame the others did not (a recompile on some ranks only); "
            f"torch: {torch_says}")


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

    __slots__ = ("process_group", "check_frames", "timeout_s", "settings", "_group", "_resolved", "error")

    def __init__(self, process_group: Any = None, check_frames: bool = False,
                 timeout_s: float = DEFAULT_TIMEOUT_S, settings: dict[str, Any] | None = None):
        self.process_group = process_group
        self.check_frames = check_frames
        self.timeout_s = timeout_s
        self.settings = dict(settings or {})
        self._group: RankGroup | None = None
        self._resolved = False
        self.error: RankMismatchError | None = None  # the failed agreement, raised again

    @property
    def group(self) -> RankGroup | None:
        """The group agreed over; None before the first compile or without one."""
        return self._group

    def before_compile(self, policy: Policy) -> None:
        """On every cache miss: the first one gathers the fingerprints. Raises
        ``RankMismatchError`` (again, after a failed agreement)."""
        if self.error is not None:
            raise self.error
        if self._resolved:
            return
        self._resolved = True
        self._group = resolve_group(self.process_group, self.timeout_s)
        if self._group is None:
            return
        prints = self._gather(fingerprint(policy, self._group.rank, self.settings),
                              f"the policy `{policy.name}` (first compile)")
        if (found := mismatch_report(prints)) is not None:
            self._fail(RankMismatchError(*found))

    def after_frame(self, explanations: FrameExplanations) -> None:
        """In ``guard_filter_fn``, with ``check_ranks``: compares this frame's decisions
        across ranks. Raises ``RankMismatchError``."""
        if self.error is not None:
            raise self.error
        if not self.check_frames or self._group is None:
            return
        what = f"frame {explanations.frame}"
        digests = self._gather(frame_digest(explanations, self._group.rank), what)
        if not (ranks := differing(digests)):
            return
        lists = self._gather(decisions(explanations), what)
        self._fail(RankMismatchError(divergence_report(digests, lists), tuple(ranks)))

    def _gather(self, obj: Any, what: str) -> list:
        try:
            return self._group.gather(obj, what)
        except RankMismatchError as e:
            self._fail(e)

    def _fail(self, error: RankMismatchError) -> None:
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
