"""Regression tests for what a new user found served stale under ``default watch`` (issue 40),
each the user's repro, on the normal path and with direct dispatch, eager backend: every call
after a change made after warm-up equals eager's on the same model (``torch.testing``).

An input object that dies and a new one per call; function state that is no dict
(``__kwdefaults__`` in place, ``__defaults__``, ``__code__``, a closure cell through
``nonlocal``); a submodule's ``__class__`` swapped; a second instance of a class, a deep copy
and regionally compiled layers served by one cache entry, each with a hook of its own; hook
order changed with ``move_to_end``; a builtin shadowed by a new module global; a metaclass
attribute read through the class; a model passed as an argument freed; models rebuilt ten
times in one process; and a change made from another thread, many times over.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import threading
import weakref

import pytest
import torch
from torch import nn

import guardpolicy as gp
from config_models import Config, Scaled

WATCH = "guardpolicy 1\n\npolicy w {\n  default watch\n}\n"
PATHS = [None, "direct"]


@pytest.fixture
def policy():
    torch._dynamo.reset()
    return gp.load(WATCH)


def _same(got, expected, what):
    torch.testing.assert_close(got, expected, msg=lambda m: f"after {what}: {m}")


def _warmed(model, policy, dispatch, x):
    """``model`` compiled and called past warm-up (direct dispatch captures after 8 quiet calls)."""
    compiled = gp.compile(model, policy, backend="eager", dispatch=dispatch)
    for _ in range(10):
        compiled(x)
    return compiled


def _both_ways(compiled, model, x, what, change, undo):
    """``change`` then ``undo``, each checked against eager on the next call."""
    change()
    _same(compiled(x), model(x), what)
    undo()
    _same(compiled(x), model(x), f"{what}, undone")


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    mode: str = "double"


class ByMode(nn.Module):
    def forward(self, b):
        return b.x * 2 if b.mode == "double" else b.x * 3


@pytest.mark.parametrize("dispatch", PATHS)
def test_a_new_input_object_per_call_is_checked_when_the_last_one_died(policy, dispatch):
    m = ByMode()
    cm = gp.compile(m, policy, backend="eager", dispatch=dispatch)
    x = torch.ones(2)
    for _ in range(12):  # a new object per call: the one before it dies, its address is reused
        cm(Batch(x))
    for mode in ("triple", "double", "triple"):
        _same(cm(Batch(x, mode)), m(Batch(x, mode)), f"a new Batch with mode {mode!r}")
    kept = Batch(x)  # one object twice in a row is adopted; then its change is still seen
    cm(kept), cm(kept), cm(kept)
    kept.mode = "triple"
    _same(cm(kept), m(kept), "the adopted batch's mode changed")


MODE = {"scale": 2.0}


def helper(x, *, mode="double"):
    return x * 2 if mode == "double" else x * 3


def helper_defaults(x, k=2.0):
    return x * k


def _closure():
    factor = 2.0

    def scaled(x):
        return x * factor

    def set_factor(value):
        nonlocal factor
        factor = value

    return scaled, set_factor


scaled, set_factor = _closure()


class Helped(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return scaled(helper_defaults(helper(self.lin(x))))


def _triple(x, *, mode="double"):
    return x * 5


@pytest.mark.parametrize("dispatch", PATHS)
def test_function_state_that_is_no_dict_is_checked(policy, dispatch):
    torch.manual_seed(0)
    m = Helped()
    cm = gp.compile(m, policy, backend="eager", dispatch=dispatch)
    x = torch.randn(2, 3)
    saved = (helper.__kwdefaults__.copy(), helper_defaults.__defaults__, helper.__code__)
    try:
        with torch.no_grad():
            for _ in range(10):
                cm(x)
            changes = [
                ("__kwdefaults__ changed in place", lambda: helper.__kwdefaults__.__setitem__("mode", "triple")),
                ("__kwdefaults__ changed back", lambda: helper.__kwdefaults__.__setitem__("mode", "double")),
                ("__defaults__ reassigned", lambda: setattr(helper_defaults, "__defaults__", (-1.0,))),
                ("__defaults__ to 0", lambda: setattr(helper_defaults, "__defaults__", (0.0,))),
                ("__code__ reassigned", lambda: setattr(helper, "__code__", _triple.__code__)),
                ("__code__ back", lambda: setattr(helper, "__code__", saved[2])),
                ("a closure cell through nonlocal", lambda: set_factor(-1.0)),
                ("the cell back", lambda: set_factor(2.0)),
            ]
            for what, change in changes:
                change()
                _same(cm(x), m(x), what)
                _same(cm(x), m(x), what + ", again")
    finally:
        helper.__kwdefaults__.update(saved[0])
        helper_defaults.__defaults__ = saved[1]
        helper.__code__ = saved[2]
        set_factor(2.0)


class Act(nn.Module):
    def forward(self, x):
        return torch.relu(x)


class OtherAct(Act):
    def forward(self, x):
        return torch.sigmoid(x) * 4


class Stack(nn.Module):
    def __init__(self, n=2):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), Act()) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("dispatch", PATHS)
def test_a_submodule_class_swapped(policy, dispatch):
    torch.manual_seed(0)
    m, x = Stack(), torch.randn(2, 4)
    act = m.layers[1][1]
    with torch.no_grad():
        _both_ways(_warmed(m, policy, dispatch, x), m, x, "a submodule's __class__ swapped to a subclass",
                   lambda: setattr(act, "__class__", OtherAct), lambda: setattr(act, "__class__", Act))


@pytest.mark.parametrize("dispatch", PATHS)
@pytest.mark.parametrize("how", ["compiled separately", "deepcopy of the compiled module", "regional"])
def test_a_second_instance_has_its_own_hooks_watched(policy, dispatch, how):
    torch.manual_seed(0)
    first, second = Stack(), Stack()
    x = torch.randn(2, 4)
    if how == "regional":  # each layer compiled: the second is served by the first's entry
        calls = [gp.compile(layer, policy, backend="eager", dispatch=dispatch) for layer in first.layers]
        c1, model = (lambda t: calls[1](calls[0](t))), first
        target = first.layers[1][0]
    elif how == "deepcopy of the compiled module":
        original = gp.compile(first, policy, backend="eager", dispatch=dispatch)
        original(x)
        c1 = copy.deepcopy(original)
        model = c1._orig_mod
        target = model.layers[0][0]
    else:
        gp.compile(first, policy, backend="eager", dispatch=dispatch)(x)
        c1 = gp.compile(second, policy, backend="eager", dispatch=dispatch)
        target, model = second.layers[0][0], second
    with torch.no_grad():
        for _ in range(10):
            c1(x)
        handles = []
        _both_ways(c1, model, x, f"a hook on the {how} instance's submodule",
                   lambda: handles.append(target.register_forward_hook(lambda mod, args, out: out * -2)),
                   lambda: handles.pop().remove())


class TwoHooks(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.lin.register_forward_hook(lambda m, a, out: out + 1)
        self.lin.register_forward_hook(lambda m, a, out: out * 2)

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("dispatch", PATHS)
def test_hook_order_changed_with_move_to_end(policy, dispatch):
    torch.manual_seed(0)
    m, x = TwoHooks(), torch.randn(2, 3)
    hooks = m.lin._forward_hooks
    swap = lambda: hooks.move_to_end(next(iter(hooks)))  # noqa: E731 - no dict event, no version change
    with torch.no_grad():
        _both_ways(_warmed(m, policy, dispatch, x), m, x, "the hooks reordered", swap, swap)


class Meta(type):
    bias = 1.0


class Knobs(metaclass=Meta):
    pass


class Clipped(nn.Module):
    def forward(self, x):
        return max(x.sum(), torch.zeros(())) + Knobs.bias


@pytest.mark.parametrize("dispatch", PATHS)
def test_a_builtin_shadowed_and_a_metaclass_attribute(policy, dispatch):
    m = Clipped()
    cm = gp.compile(m, policy, backend="eager", dispatch=dispatch)
    x = -torch.ones(3)
    module_globals = Clipped.forward.__globals__
    try:
        for _ in range(10):
            cm(x)
        module_globals["max"] = lambda a, b: a  # a new module global shadows the builtin
        _same(cm(x), m(x), "`max` shadowed by a module global")
        del module_globals["max"]
        _same(cm(x), m(x), "the shadowing global deleted")
        Meta.bias = -5.0  # read through the class, held by its metaclass
        _same(cm(x), m(x), "a metaclass attribute changed")
    finally:
        module_globals.pop("max", None)
        Meta.bias = 1.0


class Scaler(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = 1.0

    def forward(self, x):
        return self.lin(x) * self.scale


def step(model, x):
    return model(x)


def test_a_model_passed_as_an_argument_is_not_kept_alive(policy):
    cstep = gp.compile(step, policy, backend="eager")
    x = torch.randn(2, 3)
    model = Scaler()
    for _ in range(4):
        cstep(model, x)
    alive, weight = weakref.ref(model), weakref.ref(model.lin.weight)
    del model
    gc.collect()
    assert alive() is None and weight() is None  # no state, plan or recheck holds the model
    other = Scaler()  # the next model is served by the same entry, checked, and its change seen
    for _ in range(3):
        _same(cstep(other, x), other(x), "another model passed in")
    other.scale = -1.0
    _same(cstep(other, x), other(x), "the other model's attribute changed")


def test_models_rebuilt_ten_times_never_fall_back_to_eager(policy):
    """Each model has another ``scale`` (a guarded constant): one compile each. The entries of
    the compiled objects freed before are retired, so torch's recompile_limit (8) is never hit
    and no model silently runs eagerly (``compiles`` 0)."""
    x = torch.randn(2, 3)
    for i in range(12):
        model = Scaler()
        model.scale = float(i)
        compiled = gp.compile(model, policy, backend="eager")
        for _ in range(3):
            _same(compiled(x), model(x), f"rebuild {i}")
        assert gp.stats(compiled).compiles == 1, f"rebuild {i}"
        del model, compiled
        gc.collect()


@pytest.mark.parametrize("dispatch", PATHS)
def test_a_change_from_another_thread_is_never_served_stale(policy, dispatch):
    torch.manual_seed(0)
    m = Scaler()
    cm = gp.compile(m, policy, backend="eager", dispatch=dispatch)
    x = torch.randn(2, 3)
    with torch.no_grad():
        for repeat in range(30):
            m.scale = 1.0
            for _ in range(3):
                cm(x)
            done = threading.Event()
            worker = threading.Thread(target=lambda v=float(repeat + 2), d=done: (setattr(m, "scale", v), d.set()))
            worker.start()
            while not done.is_set():  # calls race the change
                cm(x)
            worker.join()
            _same(cm(x), m(x), f"scale set from another thread (repeat {repeat})")


def test_a_change_between_the_guards_and_the_gate_is_seen(policy):
    """The attach window: Dynamo's end-of-compile callbacks run after the guards were built and
    before guardpolicy attaches the gate; a change made there must not be armed as a pass."""
    from torch._dynamo.callback import callback_handler

    m, x = Scaler(), torch.randn(2, 3)
    cm = gp.compile(m, policy, backend="eager")

    def change(_args):
        m.scale = -3.0

    callback_handler.register_end_callback(change)
    try:
        cm(x)  # compiles with scale 1.0; the callback sets -3.0 before the gate is attached
    finally:
        callback_handler.remove_end_callback(change)
    for _ in range(3):
        _same(cm(x), m(x), "scale set between the guards and the gate")


def test_a_recheck_that_fails_walks_no_source(policy, monkeypatch):
    """A recompile asks every cache entry's guards again (torch's recompile reasons): a gate
    whose watched guards fail returns at once, so the walks of a call that recompiles do not
    grow with the entries (make demo's GPT-2 audit spent 80% of its time in them)."""
    from guardpolicy.runtime import watch

    walks = []
    real = watch.GroupPlan.read
    monkeypatch.setattr(watch.GroupPlan, "read", lambda self, f_locals: walks.append(1) or real(self, f_locals))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Scaled(Config(1))
    compiled = gp.compile(model, policy, backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        for scale in range(2, 7):
            model.config = Config(scale)  # moved, and its value guard fails on every entry
            walks.clear()
            torch.testing.assert_close(compiled(x), model(x))
            assert len(walks) <= 2, (scale, len(walks))  # the new entry's plan and its first check
        assert gp.stats(compiled).compiles == 5
