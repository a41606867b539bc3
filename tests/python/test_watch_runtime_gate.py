"""``watch`` at run time, the gate (guardpolicy.runtime.watch,
bindings/runtime/watch/watch_gate.h): under ``gp.compile`` a watched guard leaves torch's
per-call check and is checked again only when a dict it reads changes. Here what the gate
counts and holds, under the shape of policy ``suggest`` writes (watch_runtime_harness.py): no
watched guard evaluated on an unchanged call (the C counter), another model written on every
call does not recheck this one, a plain guard_filter_fn watches nothing, what cannot be
watched is kept and said, attributes read past a class's own ``__getattribute__``, an object
passed on every call watched and another adopted, and a cache entry that does not keep the
model alive. The change zoo is test_watch_runtime_changes.py.
"""

from __future__ import annotations

import torch
from torch import nn

import guardpolicy as gp
import watch_runtime_harness
from config_models import SOURCE, OwnGetattribute
from guardpolicy.runtime import watch
from watch_runtime_harness import CONFIG, _check, _net

# The harness's fixtures, bound by name for pytest.
policy = watch_runtime_harness.policy


def test_no_watched_guard_is_evaluated_on_an_unchanged_call(policy):
    model = _net()
    compiled = gp.compile(model, policy, backend="eager")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled(x)
        watches = gp.stats(compiled).watches
        (frame,) = watches.frames
        (state,) = frame.gate.states
        assert frame.guards > 20 and state.watched > 10 and state.verdict is None
        for _ in range(50):
            compiled(x)
        # counted in C, by the gate: the first call after the compile checks once (what changed
        # between the compile's guards and the gate's arming is seen), then none
        assert watches.rechecks == 1 and state.verdict is True
        model.block.shift_extra = 1  # a change to a watched dict: one recheck, which passes
        compiled(x)
        assert watches.rechecks == 2 and gp.stats(compiled).compiles == 1
        for _ in range(20):
            compiled(x)
        assert watches.rechecks == 2


def test_another_model_written_on_every_call_does_not_recheck_this_one(policy):
    """Two compiled models in one process, the second's attribute set before each of its calls
    (a step counter, say): the second is checked again on every call (and goes hot), the first
    never (on
    CPython 3.12+ every watched dict's change moves one epoch; each state then compares its own
    dicts' versions)."""
    from guardpolicy.tools.latency import own_class_copy

    first, second = _net(), own_class_copy(_net())  # code of its own: entries of its own
    c1, c2 = gp.compile(first, policy, backend="eager"), gp.compile(second, policy, backend="eager")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        for _ in range(3):
            c1(x), c2(x)
        r1, r2 = gp.stats(c1).watches.rechecks, gp.stats(c2).watches.rechecks
        for step in range(10):
            second.block.step = step
            torch.testing.assert_close(c2(x), second(x))
            torch.testing.assert_close(c1(x), first(x))
        # the second checked on every call: rechecked, or once hot (after 8 rechecks in a row)
        # answered by torch's manager in the gate
        checked = gp.stats(c2).watches.rechecks + sum(f.gate.hot_calls for f in gp.stats(c2).watches.frames)
        assert gp.stats(c1).watches.rechecks == r1 and checked == r2 + 10 and gp.stats(c2).watches.hot
        first.block.shift_extra = 1  # its own dict: seen
        torch.testing.assert_close(c1(x), first(x))
        assert gp.stats(c1).watches.rechecks == r1 + 1


def test_a_plain_guard_filter_fn_watches_nothing(policy):
    model = _net()
    compiled = torch.compile(model, backend="eager", options={"guard_filter_fn": policy})
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled(x)
        CONFIG.scale = 2.0
        try:
            _check(compiled, model, x, "a config attribute")  # kept, so checked by torch
        finally:
            CONFIG.scale = 1.0


def test_what_cannot_be_watched_is_kept_and_said(tmp_path):
    path = tmp_path / "all.gpol"  # GP3012 warns about it; the runtime keeps what it cannot watch
    path.write_text("guardpolicy 1\n\npolicy all {\n  keep when guard_source == LOCAL\n  default watch\n}\n")
    model = _net()
    compiled = gp.compile(model, gp.load(path), backend="eager")
    with torch.no_grad():
        compiled(torch.randn(2, 3, 8, 8))
    watches = gp.stats(compiled).watches
    unwatched = {u.guard_type: u.why for u in watches.unwatched}
    assert "not held in a dict a watcher can see" in unwatched["GLOBAL_STATE"]
    # buffers stay checked; parameters are watched with their metadata checked on every call
    assert unwatched["TENSOR_MATCH"] == "a tensor's metadata changes without any dict changing"
    assert {id(p) for p in model.parameters()} <= set(watches.frames[0].reads.tensors)


class Configured(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.config = OwnGetattribute()

    def forward(self, x):
        return self.lin(x) * self.config.scale + self.config.offset


def test_attributes_read_past_a_classs_own_getattribute_are_watched_as_attributes(policy):
    """A plain attribute is watched in the config's ``__dict__``; a property is computed, not
    read from a dict, so its guard stays checked on every call (``object.__getattribute__``
    sources included): changing what it computes from is caught."""
    torch.manual_seed(0)
    model = Configured()
    compiled = gp.compile(model, policy, backend="eager")
    x = torch.randn(2, 4)
    try:
        with torch.no_grad():
            for what, change in (("warm-up", lambda: None), ("warm-up", lambda: None),
                                 ("what a property computes from", lambda: setattr(SOURCE, "offset", 5.0)),
                                 ("a plain attribute", lambda: setattr(model.config, "scale", 3.0))):
                change()
                torch.testing.assert_close(compiled(x), model(x), msg=lambda m, what=what: f"after {what}: {m}")
    finally:
        SOURCE.offset = 1.0
    unwatched = {u.name: u.why for u in gp.stats(compiled).watches.unwatched}
    assert not any(name.endswith(("'scale')", ".scale")) for name in unwatched), unwatched


class Cache:
    """An object passed on every call, as a KV cache is: its attributes are watched."""

    def __init__(self, scale: float):
        self.scale = scale
        self.enabled = True


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, cache):
        y = self.lin(x)
        return y * cache.scale if cache.enabled else y


def test_an_object_passed_on_every_call_is_watched_and_another_adopted(policy, monkeypatch):
    torch.manual_seed(0)
    model = Scaled()
    compiled = gp.compile(model, policy, backend="eager")
    x = torch.randn(2, 4)
    watches = gp.stats(compiled).watches

    def call(cache, what):
        torch.testing.assert_close(compiled(x, cache=cache), model(x, cache=cache), msg=lambda m: f"{what}: {m}")

    with torch.no_grad():
        first = Cache(2.0)
        for _ in range(5):
            call(first, "the first request")
        # the cache's guards have a gate of their own, apart from the module's
        (cache_plan,) = [f for f in watches.frames if {("kwargs", ("cache",)), ("cache", ())} & set(f.reads.roots)]
        (module_plan,) = [f for f in watches.frames if f is not cache_plan]
        assert cache_plan.gate.rechecks == 1 and module_plan.gate.rechecks == 1  # the first call after the compile
        second = Cache(2.0)  # a new request: checked on its first two calls, adopted on the second
        for _ in range(5):
            call(second, "the second request")
        assert cache_plan.gate.rechecks == 3 and module_plan.gate.rechecks == 1 and gp.stats(compiled).compiles == 1
        second.scale = 3.0  # an attribute of the adopted object: caught
        call(second, "scale changed")
        second.enabled = False
        call(second, "enabled off")
        walked = []
        real = watch.GroupPlan.read
        monkeypatch.setattr(watch.GroupPlan, "read", lambda plan, f_locals: walked.append(plan) or real(plan, f_locals))
        for i in range(4):  # a new object on every call: each call checked, never stale
            call(Cache(float(i)), f"a new object with scale {i}")
        for _ in range(3):  # ... and the one whose guards pass reads only the new object's sources again
            call(Cache(2.0), "a new object like the first")
        # (by whichever entry serves it: the scale may have become dynamic)
        names = {source.name for plan in walked for source, _ in plan.sources}
        assert len(walked) >= 3 and names and all("cache" in n and "self" not in n for n in names), names
        third = Cache(4.0)
        for _ in range(3):
            call(third, "a third request")
        import gc
        import weakref

        gone = weakref.ref(third)
        del third, second, first
        gc.collect()
        assert gone() is None  # an adopted object dies with its request


def test_objects_taking_turns_at_a_root_each_keep_a_state(policy):
    """One hook method called by the hooks of many layers, each with its own hook object
    (diffusers' layerwise casting, accelerate's offload): each object comes back within a few
    rechecks and keeps a state, instead of a recheck on every call. A change of any is caught."""
    torch.manual_seed(0)
    model = Scaled()
    compiled = gp.compile(model, policy, backend="eager")
    x = torch.randn(2, 4)
    caches = [Cache(2.0) for _ in range(5)]

    def call(cache, what):
        torch.testing.assert_close(compiled(x, cache=cache), model(x, cache=cache), msg=lambda m: f"{what}: {m}")

    with torch.no_grad():
        for turn in range(2):  # each object is new on its first turn, and comes back on the second
            for i, cache in enumerate(caches):
                call(cache, f"object {i}, turn {turn}")
        (cache_plan,) = [f for f in gp.stats(compiled).watches.frames
                         if {("kwargs", ("cache",)), ("cache", ())} & set(f.reads.roots)]
        rechecks = cache_plan.gate.rechecks
        assert rechecks == 9  # the compile armed the first object; the others, once new, once adopted
        for turn in range(2, 6):
            for i, cache in enumerate(caches):
                call(cache, f"object {i}, turn {turn}")
        assert cache_plan.gate.rechecks == rechecks and gp.stats(compiled).compiles == 1
        caches[3].scale = 7.0
        call(caches[3], "a changed object")
        caches[1].enabled = False
        call(caches[1], "another changed object")


def test_a_cache_entry_does_not_keep_the_model_alive(policy):
    import gc
    import weakref

    model = _net()
    compiled = gp.compile(model, policy, backend="eager")
    with torch.no_grad():
        compiled(torch.randn(2, 3, 8, 8))
    gate = gp.stats(compiled).watches.frames[0].gate
    assert gate.states[0].watched > 10
    alive, weight = weakref.ref(model), weakref.ref(model.head.weight)
    del model, compiled
    gc.collect()
    assert alive() is None and weight() is None  # the gate held the root weakly, then let go
    assert gate.states == ()  # the dead root's state, with its dicts and parameters, dropped
