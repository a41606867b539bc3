"""A group of roots rechecked call after call (issue 48): a new options object on every call,
hooks that rewrite a module's parameters or attributes on every call (accelerate's offload,
``prune``). Each such call runs the group's recheck in Python (``watch.recheck.Recheck``: a walk of
its sources, or its guards' manager and the signature), which costs more than torch's own
check of those guards. After ``HOT_AFTER`` rechecks in a row (told by the gate's call count,
``WatchGate.calls``) the group is *hot*: the gate answers its calls by its watched guards'
manager alone, in C (``WatchGate.go_hot``: torch's guards, what ``torch.compile`` checks for
them), with no state, no walk and no signature, until it holds still. A hot group rechecks
again on its ``retry``-th call (64, then twice as many each time it is still hot, up to
4,096); when the state then built serves the next call, the rechecks are no longer in a row
and the group is watched again.

A group whose compile installed tensors of it as free tensors (``GroupPlan.may_go_hot`` false:
torch's guards do not compare an installed tensor's identity, the signature does) goes hot
only where a state holds them: its calls whose state is not stale (every object it read still
where it was read, its installed tensors among them) are answered by the manager and the
state's tensor check; the others are rechecked (``WatchGate.go_hot(..., with_state=True)``: a
pre-hook that sets ``weight`` on every call, ``prune``)."""

from __future__ import annotations

#: Rechecks in a row after which a group's calls are answered by torch's manager of its guards.
HOT_AFTER = 8
#: A hot group rechecks again after this many calls, then twice as many each time, up to RETRY_MAX.
RETRY_FIRST = 64
RETRY_MAX = 4096


class Hot:
    """The rechecks in a row of one group (``GroupPlan.hot``): ``calls`` answered hot here (the
    first call of each hot stretch; the gate counts the others, ``WatchGate.hot_calls``),
    ``spells`` the times it went hot."""

    __slots__ = ("last", "streak", "retry", "retry_next", "calls", "spells")

    def __init__(self) -> None:
        self.last = -2  # the gate's call number of the last recheck (or of the last hot call)
        self.streak = 0
        self.retry = RETRY_FIRST
        self.retry_next = False
        self.calls = 0
        self.spells = 0

    def stretch(self, call: int) -> int:
        """How many calls from the gate's call number ``call`` on are answered hot: 0 (this
        call rechecks), or this one and the ``n - 1`` after it (``WatchGate.go_hot``). Hot
        once the ``HOT_AFTER`` calls before it rechecked; each stretch ends with a recheck (a
        retry), and the next stretch is twice as long."""
        if call != self.last + 1:  # a call between was served by a state: the group held still
            self.streak, self.retry, self.retry_next = 0, RETRY_FIRST, False
        self.last = call
        self.streak += 1
        if self.streak <= HOT_AFTER:
            return 0
        if self.retry_next:  # recheck once: a state built now may serve the next call
            self.retry_next = False
            self.retry = min(self.retry * 2, RETRY_MAX)
            return 0
        if self.streak == HOT_AFTER + 1:
            self.spells += 1
        n = self.retry - 1  # the retry's own call ends the stretch
        self.last = call + n - 1
        self.retry_next = True
        self.calls += 1
        return n
