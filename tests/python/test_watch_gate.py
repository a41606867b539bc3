"""The C gate alone (bindings/runtime/watch/watch_gate.h, bindings/runtime/watch/watch_state.h),
on plain Python objects, no torch: its state machine (no verdict -> checking -> armed ->
changed), what each kind of row sees, states added and pruned while a call runs, and the
interleavings issue 40 found unsafe (a recheck that installs a state for a tuple of other dicts
while the gate compares the old one). ``make test-asan`` runs this file against an ASan build of
the extension with ``-D_GLIBCXX_SANITIZE_VECTOR`` (``GUARDPOLICY_CORE`` names that build's
``_core``).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import types
import weakref
from collections import OrderedDict

import pytest


def _core():
    path = os.environ.get("GUARDPOLICY_CORE")
    if not path:
        from guardpolicy import _core

        return _core
    spec = importlib.util.spec_from_file_location("_core", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


core = _core()


class Obj:
    pass


def state(roots=(), dicts=(), objects=(), functions=(), keyed=(), orders=(), lists=(), held=(), info=None):
    return core.WatchState(roots=tuple(roots), dicts=tuple(dicts), objects=tuple(objects), functions=tuple(functions),
                           keyed=tuple(keyed), orders=tuple(orders), lists=tuple(lists), held=tuple(held), tensors=(),
                           tensor_check=None, info=info)


def root_row(name, obj, held=None):
    return (name, (), obj if held is None else held, type(obj), obj.__dict__)


class Recorder:
    """A recheck that records its calls and answers ``verdict``, with ``make()`` a new state."""

    def __init__(self, verdict=True, make=None):
        self.calls, self.verdict, self.make = [], verdict, make

    def __call__(self, f_locals, st):
        self.calls.append(st)
        return self.verdict, self.make() if self.make else None


def test_no_verdict_until_checked_then_armed_until_a_dict_changes():
    root, d = Obj(), {"a": 1}
    recheck = Recorder()
    gate = core.WatchGate(recheck)
    st = state([root_row("self", root)], [d])
    gate.install(st)
    f = {"self": root}
    assert st.verdict is None
    assert gate(f) is True and recheck.calls == [st] and st.verdict is True
    for _ in range(5):
        assert gate(f) is True
    assert gate.rechecks == 1
    d["a"] = 2
    recheck.verdict = False
    assert gate(f) is False and gate(f) is False and gate.rechecks == 2  # the fail is kept
    d["a"] = 1
    recheck.verdict = True
    assert gate(f) is True and gate.rechecks == 3


def test_a_dict_another_state_watches_written_on_every_call_rechecks_only_that_state():
    """Two models in one process (or a KV cache written on every call): on 3.12+ any watched
    dict's change moves the one epoch; the state whose own dicts did not change keeps its
    verdict (its dicts' versions compared once), the other's is checked again."""
    mine, theirs = {"a": 1}, {"b": 1}
    a, b = Obj(), Obj()
    gate_a, gate_b = core.WatchGate(Recorder()), core.WatchGate(Recorder())
    gate_a.install(state([root_row("self", a)], [mine]))
    gate_b.install(state([root_row("self", b)], [theirs]))
    gate_a({"self": a}), gate_b({"self": b})
    for i in range(5):
        theirs["b"] = i + 2
        gate_a({"self": a}), gate_b({"self": b})
    assert gate_a.rechecks == 1 and gate_b.rechecks == 6
    mine["a"] = 2  # its own dict: seen, also after the epoch moved for another's
    assert gate_a({"self": a}) is True and gate_a.rechecks == 2


def test_a_change_made_during_the_recheck_is_seen_by_the_next_call():
    root, d = Obj(), {"a": 1}
    gate = None

    def recheck(f_locals, st):
        d["a"] += 1  # a write while the guards are evaluated (another thread, say)
        return True, None

    gate = core.WatchGate(recheck)
    gate.install(state([root_row("self", root)], [d]))
    gate({"self": root})
    gate({"self": root})
    assert gate.rechecks == 2  # armed on what was read before the recheck


@pytest.mark.parametrize("kind", ["class", "dict", "function", "cell", "keyed", "absent", "order", "list item",
                                  "list longer", "list shorter", "list order"])
def test_what_no_dict_event_tells_is_compared_on_every_call(kind):
    obj, g = Obj(), {"k": 1}

    def fn(x, y=1, *, z=2):
        return x

    def outer():
        v = 1

        def inner():
            return v

        def set_v(n):
            nonlocal v
            v = n

        return inner, set_v

    inner, set_v = outer()
    od = OrderedDict(a=1, b=2)
    items = [obj, 1.5, None]
    rows = {"objects": [(obj, Obj, obj.__dict__)],
            "functions": [(fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, ()),
                          (inner, inner.__code__, None, None, (1,))],
            "keyed": [(g, "k", 1), (g, "max", core.WATCH_ABSENT)],
            "orders": [(od, tuple(od))], "lists": [(items, tuple(items))]}
    gate = core.WatchGate(Recorder())
    gate.install(state(**rows))
    gate({})
    assert gate.rechecks == 1
    change = {"class": lambda: setattr(obj, "__class__", type("Sub", (Obj,), {})),
              "dict": lambda: setattr(obj, "__dict__", {}),
              "function": lambda: setattr(fn, "__defaults__", (5,)),
              "cell": lambda: set_v(7),
              "keyed": lambda: g.__setitem__("k", 2),
              "absent": lambda: g.__setitem__("max", min),
              "order": lambda: od.move_to_end("a"),
              "list item": lambda: items.__setitem__(1, 2.5),
              "list longer": lambda: items.append(None),
              "list shorter": items.pop,
              "list order": items.reverse}[kind]
    change()
    gate({})
    assert gate.rechecks == 2
    assert gate.states[0].stale() is True


def test_a_dead_root_matches_nothing_and_its_state_is_pruned():
    gate = core.WatchGate(Recorder())
    root = Obj()
    gate.install(state([root_row("self", root, weakref.ref(root, gate.prune))], [{"a": 1}]))
    gate({"self": root})
    assert len(gate.states) == 1
    del root
    gc.collect()
    assert gate.states == ()
    assert gate({"self": None}) is True and gate.rechecks == 2  # None is no dead root: checked


def test_states_per_root_capacity_and_a_new_state_replaces_the_given_one():
    roots = [Obj() for _ in range(12)]
    dicts = {id(r): {"x": 0} for r in roots}  # what each root's state watches

    def recheck(f_locals, st):
        r = f_locals["self"]
        return True, state([root_row("self", r)], [dicts[id(r)]])

    gate = core.WatchGate(recheck, capacity=4)
    for r in roots:
        gate({"self": r})
    assert len(gate.states) == 4 and gate.rechecks == 12
    gate({"self": roots[-1]})
    assert gate.rechecks == 12  # its own state, armed
    dicts[id(roots[-1])]["x"] = 1
    gate({"self": roots[-1]})
    assert len(gate.states) == 4 and gate.rechecks == 13


def test_the_state_of_the_call_s_roots_among_many_by_the_object_at_the_first_root():
    """A model compiled block by block: one state per block, each found by its module (the
    index, watch_index.h), with states of other first roots and of none asked in order, and
    the most recently installed state first where two share their roots."""
    blocks = [Obj() for _ in range(100)]
    cache, other = Obj(), Obj()
    gate = core.WatchGate(Recorder(), capacity=128)
    anything = state(info="no roots")  # the oldest: asked last
    gate.install(anything)
    gate.install(state([root_row("other", other)], info="other"))
    for b in blocks:
        gate.install(state([root_row("self", b), root_row("cache", cache)], [{"x": 0}], info=b))
    for b in blocks:
        gate({"self": b, "cache": cache})
    assert gate.rechecks == 100 and anything.verdict is None  # each block's own state, checked once
    for b in reversed(blocks):
        gate({"self": b, "cache": cache})
    assert gate.rechecks == 100  # and found again, armed
    gate({"other": other}), gate({"other": other})
    assert gate.rechecks == 101 and anything.verdict is None  # another first root: asked in order
    gate({"self": blocks[3], "cache": Obj()}), gate({"self": blocks[3], "cache": Obj()})
    assert gate.rechecks == 102 and anything.verdict is True  # no block-3 state for another cache: the last
    newer = state([root_row("self", blocks[7]), root_row("cache", cache)], [{"x": 0}], info="newer")
    gate.install(newer)
    gate({"self": blocks[7], "cache": cache})
    assert gate.rechecks == 103 and newer.verdict is True  # the newer of two states with the same roots


def test_a_dead_root_s_address_reused_matches_nothing():
    gate = core.WatchGate(Recorder(), capacity=128)
    keep = [Obj() for _ in range(64)]
    [gate.install(state([root_row("self", k, weakref.ref(k))])) for k in keep]  # no prune: the dead states stay
    [gate({"self": k}) for k in keep]  # each state armed (no loop variable holds a root after)
    assert gate.rechecks == 64
    addresses, alive = {id(k) for k in keep}, [weakref.ref(k) for k in keep]
    del keep  # all 64 freed at once; the allocator hands their blocks out again (LIFO within a pool)
    assert not any(ref() for ref in alive)
    fresh = [Obj() for _ in range(256)]
    reused = [f for f in fresh if id(f) in addresses]
    assert reused  # which ones depends on the allocator (a values array may take a block first), not whether
    for f in fresh:
        gate({"self": f})
    assert gate.rechecks == 64 + len(fresh)  # none served by a dead root's armed state


def test_issue_40_repro_a_recheck_that_installs_other_dicts_mid_call():
    """The interleaving that overflowed a vector before: the recheck swaps what the gate
    watches for a tuple of 65 dicts while the gate compares the old one."""
    root, d0 = Obj(), {"a": 1}
    many = tuple({"k": i} for i in range(64))
    calls = []
    gate = None

    def recheck(f_locals, st):
        calls.append(st)
        if len(calls) == 1:
            gate.install(state([root_row("self", root)], (d0,) + many))
            gate.prune()
        return True, None

    gate = core.WatchGate(recheck)
    gate.install(state([root_row("self", root)], [d0]))
    f = {"self": root}
    gate(f)
    d0["a"] = 2
    gate(f), gate(f)
    many[40]["k"] = -1
    gate(f)
    assert gate.rechecks >= 3 and all(s.watched in (1, 65) for s in gate.states)


def test_malformed_rows_are_type_errors():
    with pytest.raises(TypeError, match="roots"):
        state([("self", (), Obj())])
    with pytest.raises(TypeError, match="watches dicts and classes"):
        state(dicts=[[1]])
    with pytest.raises(TypeError, match="recheck returns"):
        gate = core.WatchGate(lambda f, s: True)
        gate({})
    with pytest.raises(ValueError):
        core.WatchGate(Recorder(), capacity=0)


def test_a_held_row_is_compared_by_stale_only_not_on_every_call():
    """``held`` (where each object read was found) says the state must be built anew; it is
    asked by a recheck (after a dict changed), never on every call."""
    obj, other = Obj(), Obj()
    d = {"k": obj}
    recorder = Recorder()
    gate = core.WatchGate(recorder)
    st = state(held=[(d, "k", obj)])
    gate.install(st)
    gate({})
    assert gate.rechecks == 1 and not st.stale()
    d["k"] = other  # no watched dict changed: the armed verdict stands
    gate({})
    assert gate.rechecks == 1 and st.stale()
    d["k"] = obj
    assert not st.stale()
    del d["k"]
    assert st.stale()


def test_a_recheck_that_returns_false_for_the_state_drops_it():
    """``(verdict, False)``: the given state holds objects that moved; the gate lets go of it
    (a failed state must not keep a replaced submodule alive), and the next call has none."""
    root = Obj()
    recorder = Recorder(verdict=False)
    recorder.make = lambda: False
    gate = core.WatchGate(recorder)
    st = state([root_row("self", root)], [{"a": 1}])
    gate.install(st)
    assert gate({"self": root}) is False
    assert gate.states == () and recorder.calls == [st]
    assert gate({"self": root}) is False and recorder.calls == [st, None]


def test_watch_version_moves_with_each_change_and_is_0_for_a_class_that_cannot_change():
    d, cls = {"a": 1}, type("Cls", (), {})
    before, class_before = core.watch_version(d), core.watch_version(cls)
    d["a"] = 2
    cls.x = 1
    assert core.watch_version(d) != before and core.watch_version(cls) != class_before
    assert core.watch_version(int) == 0 and core.watch_version(types.SimpleNamespace) == 0
    with pytest.raises(TypeError):
        core.watch_version([1])


def test_a_hot_gate_answers_by_its_check_alone_for_the_calls_it_was_given():
    """``go_hot(check, n)``: the next ``n`` calls are answered by ``check(f_locals)`` (torch's
    manager of the watched guards), with no state looked up and no recheck, then the states
    serve again; ``hot_calls`` counts them."""
    root, d = Obj(), {"a": 1}
    recheck = Recorder()
    gate = core.WatchGate(recheck)
    gate.install(state([root_row("self", root)], [d]))
    f = {"self": root}
    assert gate(f) is True and gate.rechecks == 1
    asked = []
    gate.go_hot(lambda f_locals: asked.append(f_locals) or len(asked) % 2 == 0, 3)
    d["a"] = 2  # a change: no recheck while hot
    assert [gate(f), gate(f), gate(f)] == [False, True, False]
    assert asked == [f, f, f] and gate.rechecks == 1 and gate.hot_calls == 3 and gate.calls == 4
    assert gate(f) is True and gate.rechecks == 2  # the stretch is over: the change is rechecked
    gate.go_hot(lambda f_locals: True, 0)
    assert gate(f) is True and gate.hot_calls == 3
    with pytest.raises(TypeError, match="callable"):
        gate.go_hot(None, 2)
    gate.go_hot(lambda f_locals: 1 / 0, 1)
    with pytest.raises(ZeroDivisionError):
        gate(f)


def test_a_hot_gate_with_state_answers_only_where_the_state_holds_what_it_was_built_of():
    """``go_hot(check, n, with_state=True)`` (a group with installed tensors): a call whose
    state is not stale is answered by ``check`` and the state's tensor check, with no recheck
    though its dict changed; one whose state read an object no longer there, or that has no
    state, is rechecked."""
    root, weight = Obj(), Obj()
    d = {"weight": weight}
    recheck = Recorder()
    gate = core.WatchGate(recheck)
    gate.install(state([root_row("self", root)], [d], held=[(d, "weight", weight)]))
    f = {"self": root}
    assert gate(f) is True and gate.rechecks == 1
    gate.go_hot(lambda f_locals: True, 5, True)
    d["step"] = 1  # its dict written (a hook's bookkeeping): answered hot
    assert gate(f) is True and gate.rechecks == 1 and gate.hot_calls == 1
    d["weight"] = Obj()  # what it read replaced: rechecked
    assert gate(f) is True and gate.rechecks == 2 and gate.hot_calls == 1
    assert gate({"self": Obj()}) is True and gate.rechecks == 3  # no state for these roots
    d["weight"] = weight
    gate.go_hot(lambda f_locals: False, 5, True)
    assert gate(f) is False and gate.hot_calls == 2


def test_a_hot_gate_with_state_never_passes_a_state_armed_failing():
    """A state built on a replaced tensor fails the compile's signature (armed failing) and is
    not stale: while hot with state, its calls keep the verdict it was armed with, and what it
    holds changing rechecks it. (Answered by the watched guards alone, which do not compare an
    installed tensor's identity, it passed: a graph holding the old tensor was served.)"""
    root, weight = Obj(), Obj()
    d = {"weight": weight}
    failing = state([root_row("self", root)], [d], held=[(d, "weight", weight)])
    recheck = Recorder(verdict=False)
    gate = core.WatchGate(recheck)
    gate.install(failing)
    f = {"self": root}
    assert gate(f) is False and gate.rechecks == 1 and failing.verdict is False
    gate.go_hot(lambda f_locals: True, 5, True)
    assert [gate(f), gate(f)] == [False, False] and gate.hot_calls == 0 and gate.rechecks == 1
    d["step"] = 1  # its dict written: rechecked, not answered hot
    recheck.verdict = True
    assert gate(f) is True and gate.rechecks == 2 and gate.hot_calls == 0
    assert gate(f) is True and gate.hot_calls == 1  # armed passing now: answered hot
