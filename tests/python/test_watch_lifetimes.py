"""What the watch keeps alive, and what a module object's class and an absent attribute do to
it (docs/design-notes/watch.md, "Lifetimes"), on the normal path and with direct dispatch, the
eager backend, ``torch.compile`` as the oracle where a change is made after warm-up:

* a model that keeps one of its own bound methods (``self.act = self._double``) is freed once
  dropped, compiled and dropped 200 times in a row, and the process does not grow; nothing
  of it survives ``torch._dynamo.reset()``;
* a gate goes with ``reset()`` (torch's manager holds it in C++, where no collector sees it);
* a model keeping its bound method, passed to a compiled function that lives on, is freed;
* a ``types.ModuleType`` subclass instance whose class is swapped after warm-up;
* an attribute read as absent (``hasattr``, ``getattr(..., None)``) and added after warm-up
  (torch 2.11's ``not hasattr`` guard passes once it is added, in a manager a filter built).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import types
import weakref

import pytest
import torch
from torch import nn

import guardpolicy as gp
from guardpolicy._core import WatchGate, WatchState
from guardpolicy.runtime.torch_internals import clear_compilation_metrics

PATHS = {"normal path": None, "direct dispatch": "direct"}
CALLS = {None: 2, "direct": 10}  # direct dispatch captures after 8 quiet calls
#: Instances compiled and dropped in a row: 200 on the normal path, fewer with direct dispatch
#: (each compiles: about 0.1 s and 0.15 s a compile on the 2-core machine).
INSTANCES = {None: 200, "direct": 50}
MIB = 2**20


class KeepsItsMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.act = self._double  # a bound method of itself, in its own __dict__
        self.register_buffer("ballast", torch.zeros(2**14), persistent=False)  # 64 KiB, never read

    def _double(self, x):
        return x * 2

    def forward(self, x):
        return self.act(self.lin(x))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _ours(before: set) -> list:
    """The gates and states alive now that were not alive at ``before`` (their ids)."""
    return [o for o in gc.get_objects() if type(o) in (WatchGate, WatchState) and id(o) not in before]


def _alive_now() -> set:
    return {id(o) for o in gc.get_objects() if type(o) in (WatchGate, WatchState)}


def _compile_call_drop(dispatch, x) -> weakref.ref:
    model = KeepsItsMethod()
    compiled = gp.compile(model, "watch_state", backend="eager", dispatch=dispatch)
    with torch.no_grad():
        for _ in range(CALLS[dispatch]):
            torch.testing.assert_close(compiled(x), model(x))
    assert gp.stats(compiled).watches.frames, "nothing was watched"
    ref = weakref.ref(model)
    del model, compiled
    gc.collect()
    clear_compilation_metrics()  # torch's record of its last 64 compiles, not what they keep
    return ref


@contextlib.contextmanager
def _trace_uncaptured():
    """pytest's log capture attaches to every logger that does not propagate, torch's
    structured-trace logger among them, in each phase of a test: each compile's trace records
    would be kept for the test's report (and their payloads made), and a loop of compiles
    would measure them."""
    log = logging.getLogger("torch.__trace")
    pytests = [h for h in log.handlers if type(h).__module__.startswith("_pytest")]
    for handler in pytests:
        log.removeHandler(handler)
    try:
        yield
    finally:
        for handler in pytests:
            log.addHandler(handler)


@pytest.mark.parametrize("dispatch", PATHS.values(), ids=PATHS.keys())
def test_a_model_keeping_its_own_bound_method_is_freed_each_time_it_is_dropped(dispatch):
    """Compiled, called and dropped in a loop: each instance is freed (its state held its
    ``__dict__`` and so its bound method, and with it the model and its 64 KiB buffer, for the
    life of the process), the process grows at most 5 MiB over the loop, and no gate or state
    of it outlives ``reset()``. The collector's older objects are frozen so that each
    ``gc.collect()`` is quick."""
    x = torch.ones(1, 2)
    before = _alive_now()
    with _trace_uncaptured():
        for _ in range(5):  # the first compiles' one-time costs
            _compile_call_drop(dispatch, x)
        gc.freeze()
        try:
            start = _rss()
            alive = [i for i in range(INSTANCES[dispatch]) if _compile_call_drop(dispatch, x)() is not None]
            grown = _rss() - start
        finally:
            gc.unfreeze()
    assert not alive, f"{len(alive)} of {INSTANCES[dispatch]} instances still alive once dropped"
    assert grown <= 5 * MIB, f"the process grew {grown / MIB:.1f} MiB over {INSTANCES[dispatch]} instances"
    torch._dynamo.reset()
    gc.collect()
    assert _rss() - start <= 5 * MIB, f"the process grew {(_rss() - start) / MIB:.1f} MiB, reset() after the loop"
    assert not _ours(before), "gates or states outlived torch._dynamo.reset()"


# -- what a state holds, on plain objects -------------------------------------------------------

class Root:
    def __init__(self):
        self.act = self.double  # a bound method of itself, in its own __dict__

    def double(self, x):
        return x * 2

    def triple(self, x):
        return x * 3


def _state_of(root):
    """A state of ``root`` as the watch builds one: its root row, its __dict__ watched, and
    where ``act`` was read (``held``)."""
    d = vars(root)
    return WatchState(roots=(("self", (), weakref.ref(root, lambda _: None), type(root), d),), dicts=(d,),
                      objects=(), functions=(), keyed=(), orders=(), lists=(), held=((d, "act", d["act"]),),
                      tensors=(), tensor_check=None, info=None)


def test_a_state_holds_neither_its_roots_dict_nor_a_bound_method_of_it():
    root = Root()
    st, ref = _state_of(root), weakref.ref(root)
    assert not st.stale()
    root.act = root.double  # another bound method object, of the same function and object
    assert not st.stale()
    root.act = root.triple
    assert st.stale()
    root.act = root.double
    assert not st.stale()
    root.__dict__ = {"act": root.double}  # a root's __dict__ replaced: stale, and not read
    assert st.stale()
    del root
    gc.collect()
    assert ref() is None and st.stale()


def test_a_released_gate_lets_go_of_its_states_and_serves_nothing():
    root = Root()
    gate = WatchGate(lambda f_locals, state: (True, None))
    gate.install(_state_of(root))
    assert gate({"self": root}) is True and gate.states
    gate.release()
    assert gate.states == () and gate({"self": root}) is False
    gate.install(_state_of(root))
    assert gate.states == ()


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("keep", [True, False], ids=["compiled object kept", "compiled object dropped"])
@pytest.mark.parametrize("dispatch", PATHS.values(), ids=PATHS.keys())
def test_a_gate_goes_with_reset(dispatch, keep):
    """torch holds a gate in its cache entry's manager, in C++, and torch's
    CheckFunctionManager keeps that manager after ``reset()`` (its finalizers on the objects
    it ID_MATCHes): the gate lets go of its states there and is freed with the manager. Kept
    by a compiled object with direct dispatch, whose capture holds the manager of the entry it
    ran, it is emptied (the capture lets go when it captures anew)."""
    before = _alive_now()
    model, x = Plain(), torch.ones(1, 2)
    compiled = gp.compile(model, "watch_state", backend="eager", dispatch=dispatch)
    with torch.no_grad():
        for _ in range(CALLS[dispatch]):
            compiled(x)
    assert [g for g in _ours(before) if type(g) is WatchGate and g.states], "no gate holds a state"
    if not keep:
        del compiled
    torch._dynamo.reset()
    gc.collect()
    if keep and dispatch is not None:
        assert not [o for o in _ours(before) if type(o) is WatchState or o.states], "a gate kept its states"
    else:
        assert not _ours(before), "a gate or state outlived torch._dynamo.reset()"
    if keep:  # compiled anew, watched anew
        with torch.no_grad():
            for _ in range(CALLS[dispatch]):
                torch.testing.assert_close(compiled(x), model(x))
        frames = gp.stats(compiled).watches.frames
        assert frames[0].gate is None and any(f.gate is not None and f.gate.states for f in frames)


def _run(model, x):
    return model(x)


@pytest.mark.parametrize("dispatch", PATHS.values(), ids=PATHS.keys())
def test_a_model_passed_in_keeping_its_own_bound_method_is_freed_while_the_compiled_function_lives(dispatch):
    """A model passed to a compiled function is one of its gate's roots, held weakly: its state
    holds neither its ``__dict__`` nor its bound method, so dropping it frees it and drops its
    state, while the function's cache entry and gate live on."""
    compiled = gp.compile(_run, "watch_state", backend="eager", dispatch=dispatch)
    x = torch.ones(1, 2)
    for i in range(8):
        model = KeepsItsMethod()
        with torch.no_grad():
            for _ in range(CALLS[dispatch]):
                torch.testing.assert_close(compiled(model, x), model(x))
        ref = weakref.ref(model)
        del model
        gc.collect()
        assert ref() is None, f"instance {i} is still alive once dropped"
    assert gp.stats(compiled).watches.frames


# -- a module object's class --------------------------------------------------------------------

class Config(types.ModuleType):
    def factor(self):
        return 2.0


class Other(types.ModuleType):
    def factor(self):
        return 3.0


class ReadsConfig(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Config("cfg")

    def forward(self, x):
        return x * self.cfg.factor()


def _swapped(compile_) -> list[bool]:
    """Whether each call after ``cfg.__class__ = Other`` equals eager's."""
    torch._dynamo.reset()
    model = ReadsConfig()
    compiled, x = compile_(model), torch.ones(2)
    for _ in range(10):
        compiled(x)
    model.cfg.__class__ = Other
    return [torch.equal(compiled(x), model(x)) for _ in range(2)]


@pytest.mark.parametrize("dispatch", PATHS.values(), ids=PATHS.keys())
def test_a_module_object_whose_class_is_swapped_is_not_served_stale(dispatch):
    """A ``types.ModuleType`` subclass instance's class is compared on every call, as an
    object's is: ``module.__class__ = Other`` changes no dict."""
    assert _swapped(lambda m: torch.compile(m, backend="eager")) == [True, True]
    assert _swapped(lambda m: gp.compile(m, "watch_state", backend="eager", dispatch=dispatch)) == [True, True]


class Shadows(types.ModuleType):
    @property
    def scale(self):
        return 5.0


class ReadsPlainModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = types.ModuleType("cfg")
        self.cfg.scale = 2.0

    def forward(self, x):
        return x * self.cfg.scale


def test_a_plain_module_objects_class_replaced_is_stale_under_torch_compile_too():
    """Why a plain ``types.ModuleType``'s class is not compared on every call (as a subclass
    instance's is): ``torch.compile`` serves it stale too, and ``torch``, ``math`` and every
    library module read would pay a load per call (docs/design-notes/watch.md)."""
    torch._dynamo.reset()
    model = ReadsPlainModule()
    compiled, x = torch.compile(model, backend="eager"), torch.ones(2)
    for _ in range(3):
        compiled(x)
    model.cfg.__class__ = Shadows
    assert not torch.equal(compiled(x), model(x))


# -- an attribute read as absent ----------------------------------------------------------------

class HasExtra(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        y = self.lin(x)
        return y + self.extra if hasattr(self, "extra") else y


class GetsExtra(HasExtra):
    def forward(self, x):
        y, extra = self.lin(x), getattr(self, "extra", None)
        return y if extra is None else y + extra


ADDED = {
    "attribute": lambda m: setattr(m, "extra", 1.0),
    "tensor attribute": lambda m: setattr(m, "extra", torch.ones(2)),
    "buffer": lambda m: m.register_buffer("extra", torch.ones(2)),
    "parameter": lambda m: m.register_parameter("extra", nn.Parameter(torch.ones(2))),
}


def _added(cls, how, compile_) -> list[bool]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = cls()
    compiled, x = compile_(model), torch.ones(1, 2)
    with torch.no_grad():
        for _ in range(10):
            compiled(x)
        ADDED[how](model)
        return [torch.equal(compiled(x), model(x)) for _ in range(2)]


@pytest.mark.parametrize("how", ADDED)
@pytest.mark.parametrize("cls", [HasExtra, GetsExtra], ids=["hasattr", "getattr with a default"])
def test_an_attribute_read_as_absent_then_added_is_not_served_stale(cls, how):
    assert _added(cls, how, lambda m: torch.compile(m, backend="eager")) == [True, True]
    for name, dispatch in PATHS.items():
        got = _added(cls, how, lambda m, d=dispatch: gp.compile(m, "watch_state", backend="eager", dispatch=d))
        assert got == [True, True], f"{name}: {got}"


def _step(model, x):
    return model(x)


@pytest.mark.parametrize("dispatch", PATHS.values(), ids=PATHS.keys())
def test_an_attribute_one_instance_lacks_and_another_has_is_not_served_stale(dispatch):
    """A compiled function's entry, warmed up on an instance that lacks ``extra``, asked for
    one that has it (a buffer): its recheck asks the new instance too."""
    compiled = gp.compile(_step, "watch_state", backend="eager", dispatch=dispatch)
    lacks, has, x = HasExtra(), HasExtra(), torch.ones(1, 2)
    has.register_buffer("extra", torch.ones(2))
    with torch.no_grad():
        for _ in range(10):
            compiled(lacks, x)
        assert [torch.equal(compiled(m, x), m(x)) for m in (has, lacks, has)] == [True, True, True]

