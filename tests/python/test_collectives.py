"""guardpolicy.distributed.collectives.wait: how a bounded wait ends, on torch's ``Work``
semantics (a ``wait(timeout)`` that times out raises RuntimeError("Operation timed out!") and
leaves the work running; ``is_completed()``; a ``wait()`` with no timeout returns or raises the
collective's own error). The fake works below follow those semantics; test_ranks.py runs the
real ones."""

from __future__ import annotations

import pytest

from guardpolicy.distributed import collectives


class FakeWork:
    """A collective that completes on its ``done_after``-th timed wait (None: never); with
    ``ends_as_slice_times_out``, that wait still times out and the work is completed just after
    (the race a rank hit in CI); ``error``: it completes with that failure."""

    def __init__(self, done_after: int | None, ends_as_slice_times_out: bool = False, error: str = ""):
        self.done_after = done_after
        self.ends_as_slice_times_out = ends_as_slice_times_out
        self.error = error
        self.timed_waits = 0
        self.completed = False

    def wait(self, timeout=None):
        if timeout is None:  # torch: blocks until completed, then raises its failure or returns
            assert self.completed, "an untimed wait on a running collective would block"
            if self.error:
                raise RuntimeError(self.error)
            return True
        self.timed_waits += 1
        if self.done_after is not None and self.timed_waits >= self.done_after:
            self.completed = True
            if self.error:
                raise RuntimeError(self.error)
            if not self.ends_as_slice_times_out:
                return True
        raise RuntimeError("Operation timed out!")

    def is_completed(self):
        return self.completed


@pytest.fixture
def kept(monkeypatch):
    """What ``wait`` abandoned (``keep_until_exit``), instead of keeping it alive for real."""
    abandoned = []
    monkeypatch.setattr(collectives, "keep_until_exit", lambda *objects: abandoned.extend(objects))
    monkeypatch.setattr(collectives, "_world", lambda group: "the group")
    return abandoned


def test_a_collective_that_completes_in_a_later_slice_is_waited_for(kept):
    work = FakeWork(done_after=3)
    collectives.wait(work, timeout_s=5.0)
    assert work.timed_waits == 3 and kept == []


def test_a_collective_that_ends_as_its_slice_times_out_has_ended(kept):
    # the slice's timeout is not the collective's failure: raising it on this rank alone
    # left the ranks out of step (gloo then aborted the process on the next collective)
    work = FakeWork(done_after=2, ends_as_slice_times_out=True)
    collectives.wait(work, timeout_s=5.0)
    assert work.timed_waits == 2 and kept == []


def test_a_failed_collective_raises_its_own_error(kept):
    work = FakeWork(done_after=1, error="Connection closed by peer [127.0.0.1]:29500")
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        collectives.wait(work, timeout_s=5.0)
    assert kept == []


def test_a_failure_seen_after_a_timed_out_slice_raises_its_own_error(kept):
    work = FakeWork(done_after=2, ends_as_slice_times_out=True, error="Connection closed by peer")
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        collectives.wait(work, timeout_s=5.0)


def test_a_collective_nobody_answers_is_unreached_at_the_deadline_and_abandoned(kept):
    work = FakeWork(done_after=None)
    with pytest.raises(collectives.Unreached, match=r"no answer within 0\.25 s"):
        collectives.wait(work, timeout_s=0.25)
    assert kept == [work, "the group"]
