"""Generated change sequences under ``watch`` (issue 40): Hypothesis stateful testing.

A ``RuleBasedStateMachine`` (its harness: watch_harness.py) builds a tiny model from the grammar
of watch_models.py (a stem, a stack of layers in a ``ModuleList``/``Sequential``/``ModuleDict``,
config objects (a namespace,
a class, a dataclass, a dict subclass with an instance dict, a slotted class; the classes'
base swapped), holders of kinds the watch leaves to torch (a mapping proxy and a keys view over
a dict, a ChainMap, a tuple of lists, a float subclass with an instance dict), helpers with
defaults and closures, module globals; an input that is a tensor, a dataclass or a dict), as
one instance, two instances of the class each compiled, a compiled object and its
``copy.deepcopy``, each layer of a stack compiled (regional compilation), a parameter-free
root, or a plain function compiled with the model as its argument, under the rules ``suggest``
writes with ``default watch`` (``WATCH``), on the normal path or with direct dispatch, on
``eager`` (and ``inductor`` in a smaller test). After a warm-up it interleaves calls with
changes drawn from watch_catalog.CATALOG (hooks, hook order, config attributes and objects,
globals, a shadowed builtin, a plain list changed in place, the holders changed, class and
metaclass attributes, monkeypatched methods, a helper's ``__defaults__``/``__kwdefaults__``/
``__code__``, the compiled frame's own defaults and code, a closure cell, ``__class__`` swaps,
the root's ``forward`` replaced, buffers, ``param.data``, dtypes, ``channels_last``,
``train``/``eval``, submodules swapped, input objects changed, dying and coming anew), each
made on this thread or another, and after EVERY call compares the compiled result with eager's
on the same model. Where they disagree, plain ``torch.compile`` is the oracle: the sequence is
replayed under it in a harness of its own (its own classes and code); if torch.compile
disagrees with eager on the same call, the change is one torch serves stale too and the example
ends there; otherwise the test fails with the sequence of changes that led to it, and
Hypothesis shrinks it to a minimal one.

Budget: ``GUARDPOLICY_WATCH_EXAMPLES`` examples in the ``soak`` test (default 40, a sixth as
many on Inductor), ``GUARDPOLICY_WATCH_STEPS`` steps each (default 10, half on Inductor): the
file takes about 4 minutes on the 2-core machine when nothing is stale (a failure is then
shrunk, each try a compile: up to a few minutes more); ``make test-watch-long`` runs 400
examples of 15 steps, about 25 minutes. The portability legs (``-m "not soak"``) run the small
test and the hand-written sequences (``REGRESSIONS``): about 30 seconds.
"""

from __future__ import annotations


import dataclasses
import os
from typing import Optional

import pytest
import torch
from hypothesis import HealthCheck, Phase, seed, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

import guardpolicy as gp
from watch_catalog import CATALOG
from watch_harness import WARMUP, Harness, Spec, specs

class WatchMachine(RuleBasedStateMachine):
    """After the warm-up, each step is a change and one or more calls, each compared with eager."""

    def __init__(self):
        super().__init__()
        self.h: Optional[Harness] = None

    @initialize(spec=specs("eager"))
    def build(self, spec):
        torch._dynamo.reset()
        self.h = Harness(spec)

    def teardown(self):
        if self.h is not None:
            self.h.close()


def _change_rule(name: str):
    """One rule per kind of change (Hypothesis's swarm testing then leaves some kinds out of
    an example), printed by its name in a failing sequence: ``state.config_attr(...)``."""

    def step(self, which, arg, on_thread, calls):
        self.h.change(name, which, arg, on_thread, calls)

    step.__name__ = step.__qualname__ = name
    return rule(which=st.integers(0, 7), arg=st.integers(0, 11), on_thread=st.booleans(),
                calls=st.sampled_from([1, 2, WARMUP]))(step)


for _name in CATALOG:
    setattr(WatchMachine, _name, _change_rule(_name))


class InductorWatchMachine(WatchMachine):
    @initialize(spec=specs("inductor"))
    def build(self, spec):
        super().build(spec)


def _budget(name: str, default: int) -> int:
    return int(os.environ.get(name, "") or default)


def _run(machine: type, examples: int, steps: int, seed_: int) -> None:
    """A fixed seed and no database: CI runs the same sequences each time. A failure is shrunk
    (each try compiles: a few minutes), with no explain phase (more runs for its line list)."""
    run_state_machine_as_test(seed(seed_)(machine), settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False))


def test_generated_change_sequences_small():
    """The portability legs' share: a few examples."""
    _run(WatchMachine, examples=3, steps=8, seed_=40)


@pytest.mark.soak
def test_generated_change_sequences():
    _run(WatchMachine, _budget("GUARDPOLICY_WATCH_EXAMPLES", 40), _budget("GUARDPOLICY_WATCH_STEPS", 10), seed_=41)


@pytest.mark.soak
def test_generated_change_sequences_inductor():
    """Inductor compiles take seconds each on this machine: a sixth of the examples, half the steps."""
    examples = max(4, _budget("GUARDPOLICY_WATCH_EXAMPLES", 40) // 6)
    _run(InductorWatchMachine, examples, max(2, _budget("GUARDPOLICY_WATCH_STEPS", 10) // 2), seed_=42)


#: Hand-written sequences: each kind of change the issue found stale, and the zoo of
#: test_watch_runtime_changes.py in the grammar's models; (id, spec, steps), a step being
#: ``Harness.change``'s arguments (a module named, or an index as the machine draws it).
REGRESSIONS = [
    ("a new input object per call, a field changed", Spec(inputs="dataclass"),
     [("input_per_call", 0, 0, False, 3), ("input_field", 0, 1)]),
    ("the input object dies, a new one with another field", Spec(inputs="dict"),
     [("input_new", 0, 0, False, 3), ("input_per_call", 0, 0), ("input_field", 0, 0)]),
    ("helper.__kwdefaults__ in place", Spec(), [("helper_kwdefaults", 0, 0)]),
    ("helper.__defaults__", Spec(), [("helper_defaults", 0, 0)]),
    ("helper.__code__", Spec(), [("helper_code", 0, 0)]),
    ("a closure cell through nonlocal", Spec(), [("closure_cell", 0, 0)]),
    ("a submodule's __class__ swapped", Spec(), [("class_swapped", "a.layers.0", 0)]),
    ("the root's __class__ swapped", Spec(), [("class_swapped", "a", 0)]),
    ("the root's forward replaced", Spec(), [("forward_replaced", "a", 0)]),
    ("a hook on a second instance", Spec(instances="twins"), [("forward_hook", "b.layers.0.lin", 0)]),
    ("a hook on a deep copy", Spec(instances="deepcopy"), [("forward_hook", "b.head", 1)]),
    ("a hook on the second layer, regional", Spec(instances="regional", depth=2), [("pre_hook", "layers.1.lin", 1)]),
    ("hook order", Spec(), [("forward_hook", "a.head", 0), ("forward_hook", "a.head", 1), ("hook_order", 0, 0)]),
    ("a builtin shadowed by a module global", Spec(), [("builtin_shadowed", 0, 0), ("builtin_shadowed", 0, 1)]),
    ("a metaclass attribute", Spec(), [("metaclass_attr", 0, 0)]),
    ("a class attribute and a monkeypatched method", Spec(container="seq", depth=2),
     [("class_attr", 0, 0), ("method_class", 0, 0), ("method_instance", "a.layers.1", 1)]),
    ("a layer's plain list of taps: items set, appended, popped, reversed, replaced", Spec(depth=2),
     [("list_changed", "a.layers.1", arg) for arg in range(8)]),
    ("config attributes at their boundaries", Spec(config="dataclass"),
     [("config_attr", "a.layers.0", arg) for arg in range(12)]),
    ("a config replaced, then changed; its __dict__ reassigned", Spec(config="class"),
     [("config_replaced", "a", 0), ("config_attr", "a", 7), ("config_replaced", "a", 1), ("config_dict", "a", 0)]),
    ("a dict-subclass config: attributes, replaced, its __dict__ and its class's base", Spec(config="dict", depth=2),
     [("config_attr", "a.layers.1", 7), ("config_bases", "a", 0), ("config_replaced", "a", 1), ("config_dict", "a", 0),
      ("config_bases", "a", 1)]),
    ("a config with __slots__: attributes and replaced", Spec(config="slots"),
     [("config_attr", "a", 1), ("config_replaced", "a", 1), ("config_attr", "a.layers.0", 9)]),
    ("a config class's base swapped, then back", Spec(config="class"), [("config_bases", "a", 0), ("config_bases", "a", 1)]),
    ("changes made on another thread", Spec(inputs="dataclass"),
     [("config_attr", "a", 1, True), ("global_value", 0, 0, True), ("input_field", 0, 0, True)]),
    ("hooks added and removed, global hooks", Spec(container="dict"),
     [("forward_hook", "a.layers.l0", 0), ("pre_hook", "a", 0), ("global_hook", 0, 0), ("global_hook", 0, 1),
      ("remove_hook", 0, 0), ("remove_hook", 0, 0), ("remove_hook", 0, 0), ("remove_hook", 0, 0)]),
    ("dtypes, channels_last, train/eval, buffers, param.data", Spec(conv=True),
     [("to_dtype", "a", 0), ("to_dtype", "a", 2), ("to_dtype", "a", 1), ("to_dtype", "a", 2), ("channels_last", 0, 0),
      ("train_eval", "a", 0), ("train_eval", "a", 1), ("buffer_replaced", 0, 0), ("buffer_replaced", 0, 2),
      ("param_data", 0, 1), ("param_dtype", "a.head", 0), ("submodule_swapped", 0, 0), ("submodule_swapped", 0, 3)]),
    ("holders of kinds not in the table: a mapping proxy, a keys view, a ChainMap's back dict, a float subclass",
     Spec(depth=2), [("holder_changed", "a.layers.1", arg) for arg in (0, 1, 2, 3, 4, 7, 9, 10, 11)]),
    ("a parameter-free root: its defaults, its code, its state and holders", Spec(instances="free", inputs="dict"),
     [("frame_defaults", 0, 0), ("frame_code", 0, 0), ("config_attr", "a", 1), ("holder_changed", "a", 0),
      ("list_changed", "a", 2), ("frame_code", 0, 1), ("forward_hook", "a", 1), ("param_data", 0, 0),
      ("frame_defaults", 0, 1)]),
    ("a plain compiled function, the model its argument", Spec(instances="function"),
     [("frame_defaults", 0, 0), ("frame_code", 0, 0), ("forward_hook", "a.head", 0), ("config_attr", "a", 1),
      ("frame_code", 0, 1), ("pre_hook", "a", 2), ("class_swapped", "a", 0)]),
]

#: Changes plain torch.compile serves stale too (the design note lists them): the oracle's replay
#: shows it, and the sequence ends there.
TORCH_STALE = [("a ChainMap's front dict gains a key", 5), ("a list inside a tuple changed in place", 8)]


@pytest.mark.parametrize("dispatch", [None, "direct"])
@pytest.mark.parametrize("spec, steps", [pytest.param(spec, steps, id=name) for name, spec, steps in REGRESSIONS])
def test_hand_written_sequence(spec, steps, dispatch):
    h = Harness(dataclasses.replace(spec, dispatch=dispatch))
    try:
        for step in steps:
            h.change(*step)
    finally:
        h.close()


@pytest.mark.parametrize("arg", [arg for _, arg in TORCH_STALE], ids=[what for what, _ in TORCH_STALE])
def test_a_change_torch_compile_serves_stale_too_ends_the_sequence(arg):
    h = Harness(Spec())
    try:
        h.change("holder_changed", "a.layers.0", arg)
        h.change("config_attr", "a", 1)  # nothing more once ended
        assert h.ended and h.ended.startswith("torch.compile is stale too on call 3"), h.log
        assert h.steps == [("holder_changed", "a.layers.0", arg, False, 1)]
    finally:
        h.close()


def test_a_change_only_guardpolicy_misses_fails_the_sequence():
    """The oracle's other side: a policy that drops every guard (unsafe) is stale on a
    config attribute where torch.compile is right, and the harness says so."""
    h = Harness(Spec(), policy=gp.load_std("skip_all_guards"))
    try:
        with pytest.raises(AssertionError, match=r"a \(compiled\) disagrees with eager on call 3"):
            h.change("config_attr", "a", 1)
        assert h.ended is None
    finally:
        h.close()
