"""The collectives guardpolicy issues across ranks, each bounded on every rank.

torch's gloo ``monitored_barrier`` bounds the wait on rank 0 only (the other ranks wait for
rank 0's answer without a deadline), and a blocking collective cannot be interrupted: a rank
that recompiled alone waited forever, deaf to SIGINT. Here every collective is started
asynchronously and waited for in short slices (``SLICE_S``) up to a deadline, so that

* every rank gives up after ``timeout_s`` (``Unreached``), whichever rank is missing;
* SIGINT (``KeyboardInterrupt``) is served between two slices, within ``SLICE_S``;
* an abandoned collective (timed out or interrupted) cannot hold the process at exit: gloo
  joins its worker threads when the group is destroyed, which waits until the peers answer
  or exit, so the group and the work are kept alive to the end of the process
  (``keep_until_exit``).
* the group is out of step after that: a later collective could pair with another rank's
  earlier one, and gloo aborts the process when their sizes differ ("op.preamble.length <=
  op.nbytes"). So guardpolicy starts no collective on it again, for any compiled object
  (``OutOfStep``); the object whose agreement failed raises that error again
  (``agreement.RankAgreement``).
* a completed collective is let go of before the caller goes on (``run``). gloo's worker
  thread drops its reference to the work just after marking it completed, and dropping a
  tensor's last C++ reference releases its Python object, which takes the GIL. Once
  ``torch.compile`` has run, the group outlives ``destroy_process_group`` (torch keeps
  references to it), so the worker is not joined there: when the process ended just after an
  agreement, the worker asked for the GIL during interpreter shutdown, and the process
  aborted ("terminate called without an active exception"; the mismatch example of
  docs/distributed.md, about one run in 30). So ``run`` waits, giving the GIL away, until
  every tensor of the collective has no C++ reference left (its Python reference count is
  back to what it was before the start), ``RELEASE_S`` at most.

``gather_objects`` is ``all_gather_object`` made of two such collectives (the sizes, then the
pickled bytes padded to the largest).
"""

from __future__ import annotations

import ctypes
import datetime
import pickle
import sys
import time
from typing import Any

#: How long one wait lasts before SIGINT can be served, in seconds.
SLICE_S = 0.1

#: How long ``run`` waits at most for torch's worker thread to let go of a completed
#: collective's tensors, in seconds (it is a matter of microseconds unless the machine is busy).
RELEASE_S = 0.1


class Unreached(RuntimeError):
    """A collective that did not complete within its deadline (not every rank came)."""


class OutOfStep(RuntimeError):
    """A collective not started: this process abandoned one on the same group before."""


#: The process groups on which this process abandoned a collective (kept alive to the end of
#: the process by ``keep_until_exit``, so the objects stay valid keys).
_out_of_step: set = set()


def check_in_step(group: Any) -> None:
    """Raises ``OutOfStep`` when this process abandoned a collective on ``group`` (None: the
    default group)."""
    if _world(group) in _out_of_step:
        raise OutOfStep("this process group is out of step on this rank: an earlier guardpolicy collective "
                        "on it timed out or was interrupted here, and a new one could pair with it")


def keep_until_exit(*objects: Any) -> None:
    """Keeps ``objects`` alive until the process ends: never destroyed, so exiting does not
    wait for a collective nobody will answer (see the module docstring)."""
    for obj in objects:
        if obj is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def wait(work: Any, timeout_s: float, group: Any = None) -> None:
    """Waits for ``work`` (an async collective) at most ``timeout_s`` seconds, in slices.
    Raises ``Unreached`` after the deadline, torch's RuntimeError when the collective failed
    (never a slice's own timeout: a collective that ends as a slice times out has ended),
    ``KeyboardInterrupt`` on SIGINT; on either of the first and the last the work is abandoned
    (``keep_until_exit``, with ``group``) and the group is out of step (``check_in_step``)."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            try:
                work.wait(datetime.timedelta(seconds=max(min(SLICE_S, remaining), 0.001)))
                return
            except RuntimeError:
                if work.is_completed():
                    # It failed, or it ended between the slice's timeout and this check: a
                    # wait with no timeout raises the collective's own error, or returns. (A
                    # timeout raised here, on one rank only, left the ranks out of step.)
                    work.wait()
                    return
                if remaining <= SLICE_S:
                    raise Unreached(f"no answer within {timeout_s:g} s") from None
    except (Unreached, KeyboardInterrupt):
        world = _world(group)
        keep_until_exit(work, world)
        _out_of_step.add(world)
        raise


def run(start: Any, tensors: list, timeout_s: float, group: Any = None) -> None:
    """Starts a collective (``start()``, which returns torch's async ``Work``) over
    ``tensors`` (every tensor it reads or writes), waits for it as ``wait`` does, then until
    no C++ reference to any of ``tensors`` is left (``RELEASE_S`` at most; see the module
    docstring). Raises as ``wait`` does."""
    before = _python_refs(tensors)
    work = start()
    wait(work, timeout_s, group)
    del work  # when the worker has let go already, the work ends here, on this thread
    deadline = time.monotonic() + RELEASE_S
    while _python_refs(tensors) != before and time.monotonic() < deadline:
        time.sleep(0.0002)  # gives the GIL away, to the worker thread waiting for it


def _python_refs(tensors: list) -> list:
    # A tensor's Python object holds one more reference while C++ holds the tensor too.
    return [sys.getrefcount(t) for t in tensors]


def _world(group: Any) -> Any:
    if group is not None:
        return group
    import torch.distributed as dist

    return dist.group.WORLD


def gather_objects(dist: Any, obj: Any, size: int, group: Any, timeout_s: float) -> list:
    """``obj`` of every rank of ``group`` (``size`` ranks), in group order: one bounded
    all_gather of the pickled sizes, one of the bytes. Raises as ``wait`` does; the second
    collective's deadline is what is left of the first's; ``OutOfStep`` before starting either
    on a group this process abandoned a collective on."""
    import torch

    check_in_step(group)
    deadline = time.monotonic() + timeout_s
    data = pickle.dumps(obj)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    length = torch.tensor([len(data)], dtype=torch.int64)
    run(lambda: dist.all_gather(sizes, length, group=group, async_op=True), [*sizes, length], timeout_s, group)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    chunks = [torch.zeros(longest, dtype=torch.uint8) for _ in range(size)]
    run(lambda: dist.all_gather(chunks, mine, group=group, async_op=True), [*chunks, mine],
        max(deadline - time.monotonic(), 0.001), group)
    return [pickle.loads(c[:int(n.item())].numpy().tobytes()) for c, n in zip(chunks, sizes)]


def all_reduce_sum(dist: Any, tensor: Any, group: Any, timeout_s: float) -> None:
    """``tensor`` summed over ``group`` in place, waited for as ``wait`` does; ``OutOfStep``
    as ``gather_objects``."""
    check_in_step(group)
    run(lambda: dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=True), [tensor], timeout_s, group)
