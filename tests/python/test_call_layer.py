"""guardpolicy._core.CallLayer (bindings/runtime/call_layer.h), the C part of verify's per-call
path: what it counts, when it samples, what it passes on, that it settles pending frames also
when the call raises, and that it keeps nothing alive. (Its use with real torch.compile runs is
in test_verify.py.)"""

import gc
import weakref

import pytest

from guardpolicy._core import CallLayer


class Stats:
    def __init__(self, every):
        self.call_count = 0
        self.verify_every = every


class Path(CallLayer):
    def __init__(self, inner, stats, pending):
        super().__init__(inner, stats, pending)
        self.sampled = []
        self.settled = 0

    def _sampled(self, call, *args, **kwargs):
        self.sampled.append((call, args, kwargs, self.stats.call_count))

    def _settle(self):
        self.settled += 1
        del self.pending_list[:]


def make(every, inner=lambda *a, **k: (a, k), pending=None):
    pending = [] if pending is None else pending
    path = Path(inner, Stats(every), pending)
    path.pending_list = pending
    return path


def test_counts_every_call_and_samples_every_nth_before_it_runs():
    path = make(3)
    outs = [path(i, key=i) for i in range(1, 8)]
    assert outs == [((i,), {"key": i}) for i in range(1, 8)]
    assert path.stats.call_count == 7
    assert path.sampled == [(3, (3,), {"key": 3}, 3), (6, (6,), {"key": 6}, 6)]


def test_no_verify_never_samples():
    for every in (0, None):
        path = make(every)
        for _ in range(5):
            path()
        assert path.stats.call_count == 5 and path.sampled == []


def test_the_count_is_read_from_stats_each_call():
    path = make(10)
    path.stats.call_count = 19  # direct dispatch and verify's recompile move the count themselves
    path("x")
    assert path.stats.call_count == 20 and [s[0] for s in path.sampled] == [20]


def test_settles_pending_frames_after_the_call_also_when_it_raises():
    pending = []

    def compiles_then_raises(fail):
        pending.append("frame")
        if fail:
            raise KeyError("from inner")
        return "ok"

    path = make(0, compiles_then_raises, pending)
    assert path(False) == "ok" and path.settled == 1 and pending == []
    with pytest.raises(KeyError, match="from inner"):
        path(True)
    assert path.settled == 2 and pending == []
    path.inner = lambda: "no compile"
    assert path() == "no compile" and path.settled == 2


def test_a_sampled_call_that_raises_does_not_run_the_call():
    ran = []
    path = make(1, lambda: ran.append(1))

    def refuse(call, *args, **kwargs):
        raise RuntimeError(f"stale on call {call}")

    path._sampled = refuse
    with pytest.raises(RuntimeError, match="stale on call 1"):
        path()
    assert ran == [] and path.stats.call_count == 1


def test_bad_construction_and_uninitialised_calls_raise():
    with pytest.raises(TypeError):
        CallLayer(print, Stats(0), ())  # pending must be a list
    with pytest.raises(TypeError, match="was not called"):
        CallLayer.__new__(CallLayer)()
    path = make(2)
    path.stats.call_count = "many"
    with pytest.raises(TypeError):
        path()


def test_keeps_nothing_alive_after_it_goes():
    class Inner:
        def __call__(self):
            return 1

    inner, stats = Inner(), Stats(0)
    path = Path(inner, stats, [])
    path.cycle = path  # a reference cycle through the instance dict: the collector frees it
    refs = [weakref.ref(o) for o in (inner, stats, path)]
    del inner, stats, path
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
