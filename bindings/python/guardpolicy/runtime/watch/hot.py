"""A group of roots read anew call after call (issue 48): a new options object on every call,
a model whose watched state moves on every call. Each such call walks the group's sources in
Python (``GroupPlan.read``), which costs more than torch's own check of those guards. After
``HOT_AFTER`` walks in a row (told by the gate's call count, ``WatchGate.calls``) the group is
*hot*: its calls are answered by its watched guards' manager alone (torch's guards, checked in
C: what ``torch.compile`` checks for them), with no walk, no state and no signature, until it
holds still. A hot group walks again on its ``retry``-th call (64, then twice as many each time
it is still hot, up to 4,096); when the state then built serves the next call from the gate,
the walks are no longer in a row and the group is watched again.

Only a group whose compile installed no tensor of it as a free tensor goes hot
(``GroupPlan.may_go_hot``): torch's guards do not compare an installed tensor's identity, the
signature does."""

from __future__ import annotations

#: Walks in a row after which a group's calls are answered by torch's manager of its guards.
HOT_AFTER = 8
#: A hot group walks again after this many calls, then twice as many each time, up to RETRY_MAX.
RETRY_FIRST = 64
RETRY_MAX = 4096


class Hot:
    """The walks in a row of one group (``GroupPlan.hot``): ``calls`` answered hot so far
    (``stats(compiled).watches.hot``), ``spells`` the times it went hot."""

    __slots__ = ("last", "streak", "retry", "until_retry", "calls", "spells")

    def __init__(self) -> None:
        self.last = -2  # the gate's call number of the last walk
        self.streak = 0
        self.retry = RETRY_FIRST
        self.until_retry = 0
        self.calls = 0
        self.spells = 0

    def skip_walk(self, call: int) -> bool:
        """Whether the walk the gate's call number ``call`` would make is skipped: the
        group was read anew on the ``HOT_AFTER`` calls before it, and this is not a retry."""
        if call != self.last + 1:  # a call between was served by a state: the group held still
            self.streak, self.retry = 0, RETRY_FIRST
        self.last = call
        self.streak += 1
        if self.streak <= HOT_AFTER:
            return False
        if self.streak == HOT_AFTER + 1:
            self.spells += 1
            self.until_retry = self.retry
        self.until_retry -= 1
        if self.until_retry <= 0:  # walk once: a state built now may serve the next call
            self.retry = min(self.retry * 2, RETRY_MAX)
            self.until_retry = self.retry
            return False
        self.calls += 1
        return True
