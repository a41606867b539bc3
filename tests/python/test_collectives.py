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
    monkeypatch.setattr(collectives, "_out_of_step", set())  # this process's record stays as it was
    return abandoned


def test_a_collective_that_completes_in_a_later_slice_is_waited_for(kept):
    work = FakeWork(done_after=3)
    collectives.wait(work, timeout_s=5.0)
    assert work.timed_waits == 3 and kept == []


def test_a_collective_that_ends_as_its_slice_times_out_has_ended(kept):
    # the slice's timeout is not the collective's failure: raising it on this rank alone
    # left the ranks out of step (gloo then aborted the process on the next collective)
    work = FakeWork(done_after=2, ends_as_slice_times_out=True)
    collectives.wait(work, timeout_s=5.0, group="g")
    assert work.timed_waits == 2 and kept == []
    collectives.check_in_step("g")  # nothing abandoned: the group stays in step


def test_a_failed_collective_raises_its_own_error(kept):
    work = FakeWork(done_after=1, error="Connection closed by peer [127.0.0.1]:29500")
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        collectives.wait(work, timeout_s=5.0)
    assert kept == [] and collectives._out_of_step == set()  # it ended: nothing left to pair with


def test_a_failure_seen_after_a_timed_out_slice_raises_its_own_error(kept):
    work = FakeWork(done_after=2, ends_as_slice_times_out=True, error="Connection closed by peer")
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        collectives.wait(work, timeout_s=5.0)


def test_a_collective_nobody_answers_is_unreached_at_the_deadline_and_abandoned(kept):
    work = FakeWork(done_after=None)
    with pytest.raises(collectives.Unreached, match=r"no answer within 0\.25 s"):
        collectives.wait(work, timeout_s=0.25)
    assert kept == [work, "the group"]


class FakeDist:
    """The ``torch.distributed`` calls ``gather_objects`` and ``all_reduce_sum`` make, recorded;
    each collective nobody answers."""

    class ReduceOp:
        SUM = "sum"

    def __init__(self):
        self.started = []

    def all_gather(self, outputs, tensor, group=None, async_op=False):
        self.started.append(("all_gather", group))
        return FakeWork(done_after=None)

    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        self.started.append(("all_reduce", group))
        return FakeWork(done_after=None)


@pytest.fixture
def out_of_step(monkeypatch, kept):
    """The record of the groups out of step (fresh), groups named by strings."""
    monkeypatch.setattr(collectives, "_world", lambda group: group or "WORLD")
    return collectives._out_of_step


def test_a_group_whose_collective_was_abandoned_starts_no_other(out_of_step):
    import torch

    dist = FakeDist()
    with pytest.raises(collectives.Unreached):
        collectives.all_reduce_sum(dist, torch.zeros(1, dtype=torch.int64), "g1", timeout_s=0.2)
    assert out_of_step == {"g1"} and dist.started == [("all_reduce", "g1")]
    for start in (lambda: collectives.gather_objects(dist, "obj", 2, "g1", 5.0),
                  lambda: collectives.all_reduce_sum(dist, torch.zeros(1, dtype=torch.int64), "g1", 5.0)):
        with pytest.raises(collectives.OutOfStep, match="out of step on this rank"):
            start()
    assert dist.started == [("all_reduce", "g1")]  # neither started a collective
    with pytest.raises(collectives.Unreached):  # another group is in step: it starts, unanswered
        collectives.gather_objects(dist, "obj", 2, None, timeout_s=0.2)
    assert dist.started[1:] == [("all_gather", None)] and out_of_step == {"g1", "WORLD"}


def test_an_interrupted_collective_leaves_its_group_out_of_step(out_of_step):
    class Interrupted(FakeWork):
        def wait(self, timeout=None):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        collectives.wait(Interrupted(done_after=None), timeout_s=5.0, group="g2")
    assert out_of_step == {"g2"}
    with pytest.raises(collectives.OutOfStep):
        collectives.check_in_step("g2")
    collectives.check_in_step("g3")  # in step: returns


def test_run_returns_once_the_worker_thread_has_let_go_of_the_tensors():
    """gloo's worker thread marks a collective completed, then drops its references to the
    tensors, which takes the GIL; a process that ended in between aborted at exit. Here a
    thread plays the worker: it holds the tensors 20 ms past completion."""
    import sys
    import threading
    import time

    import torch

    tensors = [torch.zeros(1), torch.zeros(2)]
    before = [sys.getrefcount(t) for t in tensors]
    completed = threading.Event()

    class Completed(FakeWork):
        def wait(self, timeout=None):
            completed.wait()
            return True

    def start():
        held = list(tensors)

        def worker():
            nonlocal held
            completed.set()
            time.sleep(0.02)
            held = None

        threading.Thread(target=worker).start()
        return Completed(done_after=1)

    collectives.run(start, tensors, timeout_s=5.0)
    assert [sys.getrefcount(t) for t in tensors] == before


def test_a_tensor_held_by_a_running_gloo_collective_has_one_more_python_reference():
    """What ``run`` reads to know the worker has let go, on this torch: while torch's C++ work
    holds a tensor, its Python object holds one more reference; after ``run``, none."""
    import datetime
    import sys

    import torch
    import torch.distributed as dist

    group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=30))
    out, inp = [torch.zeros(3)], torch.arange(3.0)
    refs = lambda: [sys.getrefcount(t) for t in (*out, inp)]  # noqa: E731
    before = refs()
    work = group.allgather([out], [inp])
    work.wait()
    assert refs() == [n + 1 for n in before]
    del work
    collectives.run(lambda: group.allgather([out], [inp]), [*out, inp], timeout_s=5.0)
    assert refs() == before and out[0].tolist() == [0.0, 1.0, 2.0]
