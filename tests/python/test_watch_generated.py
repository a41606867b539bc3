"""Generated change sequences under ``watch`` (issue 40): Hypothesis stateful testing.

A ``RuleBasedStateMachine`` builds a tiny model from the grammar of watch_models.py (a stem, a
stack of layers in a ``ModuleList``/``Sequential``/``ModuleDict``, config objects (a namespace,
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

import contextlib
import copy
import dataclasses
import functools
import os
import sys
import threading
from typing import Callable, Optional

import pytest
import torch
from hypothesis import HealthCheck, Phase, seed, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test
from torch import nn

import guardpolicy as gp
from guardpolicy.runtime.torch_internals import inductor_fallback_random
from guardpolicy.tools.suggest import render
from watch_catalog import CATALOG, Nothing, fresh_models

#: The rules ``suggest`` ends every policy with, nothing dropped (as test_watch_runtime.py).
WATCH = "guardpolicy 1\n\npolicy watched {\n" + "\n".join(render.watched_lines()) + "\n  default watch\n}\n"
POLICY = gp.load(WATCH)
WARMUP = 10  # direct dispatch captures after 8 quiet calls
SEED = 7  # torch's seed before each call: Dropout in train() draws the same numbers in both


@dataclasses.dataclass(frozen=True)
class Spec:
    """One model of the grammar and how it is compiled."""

    instances: str = "single"  # single | twins | deepcopy | regional | free | function
    container: str = "list"  # list | seq | dict
    depth: int = 1
    config: str = "namespace"  # namespace | class | dataclass | dict | slots
    conv: bool = False  # a Conv2d stem (channels_last matters) or a Linear one
    inputs: str = "tensor"  # tensor | dataclass | dict (regional: tensor)
    dispatch: Optional[str] = None  # None (torch's path) | "direct"
    backend: str = "eager"


def specs(backend: str):
    return st.builds(Spec, instances=st.sampled_from(["single", "twins", "deepcopy", "regional", "free", "function"]),
                     container=st.sampled_from(["list", "seq", "dict"]), depth=st.integers(1, 3),
                     config=st.sampled_from(["namespace", "class", "dataclass", "dict", "slots"]), conv=st.booleans(),
                     inputs=st.sampled_from(["tensor", "dataclass", "dict"]),
                     dispatch=st.sampled_from([None, "direct"]), backend=st.just(backend))


@dataclasses.dataclass
class Pipeline:
    """What one compiled object serves and its eager oracle: ``model`` is what the changes
    change, ``roots`` the modules whose frames are compiled (the layers, regionally)."""

    name: str
    model: nn.Module
    compiled: Callable
    eager: Callable
    roots: list
    objects: list  # what gp.compile returned


def _chain(layers) -> Callable:
    return lambda x: functools.reduce(lambda y, layer: layer(y), layers, x)


class Harness:
    """One example: the models, the compiled objects, the changes made and their log.

    ``plain`` compiles with plain ``torch.compile`` instead (the oracle's replay): a call that
    disagrees with eager is then noted in ``wrong`` as ``(pipeline, call)``, not raised.
    ``policy`` replaces ``POLICY`` (the oracle's self-test)."""

    def __init__(self, spec: Spec, plain: bool = False, policy: Optional[gp.Policy] = None):
        self.spec, self.mod, self.plain, self.policy = spec, fresh_models(), plain, policy or POLICY
        self.helper_code = self.mod.helper.__code__
        self.frame_code = (self.mod.Free.forward.__code__, self.mod.step.__code__)
        self.pipelines: list[Pipeline] = []
        self.handles: list = []
        self.log: list[str] = [f"built {spec}"]
        self.steps: list[tuple] = []  # Harness.change's arguments, in order: what the oracle replays
        self.wrong: set = set()
        self.ended: Optional[str] = None  # why the sequence stopped early (torch.compile stale too)
        self.calls = 0
        self.input_kind = "tensor" if spec.instances == "regional" else spec.inputs
        self.fields = {"scale": 1.0, "mode": "add"}
        self.x = torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(3))
        self.held = self.make_input() if self.input_kind != "tensor" else None
        self.stack = contextlib.ExitStack()
        self.stack.enter_context(torch.no_grad())
        # a long sequence recompiles a frame more than torch's 8 times: still compiled, not eager
        self.stack.enter_context(torch._dynamo.config.patch(recompile_limit=64, accumulated_recompile_limit=4096))
        if spec.backend == "inductor":
            self.stack.enter_context(inductor_fallback_random())  # Dropout in train(): eager's numbers
        try:
            self._build()
        except BaseException:
            self.close()  # no grad mode, config patch or global hook left to the next test
            raise

    # -- building

    def _compile(self, m):
        if self.plain:
            return torch.compile(m, backend=self.spec.backend)
        return gp.compile(m, self.policy, backend=self.spec.backend, dispatch=self.spec.dispatch)

    def _net(self, seed_: int) -> nn.Module:
        torch.manual_seed(seed_)
        s = self.spec
        return self.mod.Net(s.container, s.depth, s.config, s.conv).eval()

    def _build(self) -> None:
        s = self.spec
        if s.instances == "regional":
            torch.manual_seed(0)
            stack = nn.ModuleList(self.mod.Layer(s.config) for _ in range(s.depth)).eval()
            compiled = [self._compile(layer) for layer in stack]
            roots = [(f"layers.{i}", layer) for i, layer in enumerate(stack)]
            self.pipelines.append(Pipeline("layers", stack, _chain(compiled), _chain(stack), roots, compiled))
        elif s.instances == "free":
            model = self.mod.Free(s.config).eval()
            compiled = self._compile(model)
            self.pipelines.append(Pipeline("a", model, compiled, model, [("a", model)], [compiled]))
        elif s.instances == "function":
            model, step = self._net(0), self.mod.step
            compiled = self._compile(step)
            self.pipelines.append(Pipeline("a", model, lambda b: compiled(model, b), lambda b: step(model, b),
                                           [("a", model)], [compiled]))
        else:
            model = self._net(0)
            first = self._compile(model)
            self.pipelines.append(Pipeline("a", model, first, model, [("a", model)], [first]))
            if s.instances == "twins":
                other = self._net(1)
                second = self._compile(other)
                self.pipelines.append(Pipeline("b", other, second, other, [("b", other)], [second]))
        warmup = WARMUP if s.dispatch == "direct" else 2
        self.call(warmup, "warm-up")
        if s.instances == "deepcopy":
            twin = copy.deepcopy(self.pipelines[0].compiled)
            model = twin._orig_mod
            self.pipelines.append(Pipeline("b", model, twin, model, [("b", model)], [twin]))
            self.call(warmup, "deepcopy of a, warm-up")
        # (a second instance or layer may be served by the first one's cache entry: no frame of its own)
        if not self.plain and self.policy is POLICY:
            assert gp.stats(self.pipelines[0].objects[0]).watches.frames, "nothing was watched"

    # -- what the catalog's changes pick from

    def models(self):
        return [(p.name, p.model) for p in self.pipelines]

    def modules(self):
        return [(f"{p.name}.{n}" if n else p.name, m) for p in self.pipelines for n, m in p.model.named_modules()]

    def config_owners(self):
        return [(n, m) for n, m in self.modules() if "cfg" in vars(m)]

    def layers(self):
        return [(n, m) for n, m in self.modules() if isinstance(m, self.mod.Layer)]

    def holders(self):
        return [(n, m) for n, m in self.modules() if "taps" in vars(m)]

    def swappable(self):
        return [(n, m) for n, m in self.modules() if isinstance(m, (self.mod.Layer, self.mod.Net))]

    def roots(self):
        return [root for p in self.pipelines for root in p.roots]

    def parameters(self):
        return [(f"{p.name}.{n}", t) for p in self.pipelines for n, t in p.model.named_parameters()]

    def make_input(self):
        """An input in the dtype of the first module (``.half()`` of the model: a half input;
        of one layer: each module casts what it is given)."""
        weight = next(self.pipelines[0].model.parameters(), None) if self.pipelines else None
        x = self.x if weight is None else self.x.to(weight.dtype)
        if self.input_kind == "dataclass":
            return self.mod.Batch(x, **self.fields)
        return {"x": x, **self.fields} if self.input_kind == "dict" else x

    # -- steps

    def change(self, name: str, target: int, arg: int, on_thread: bool = False, calls: int = 1) -> None:
        """Makes one change (on another thread if asked), then ``calls`` calls (direct dispatch
        captures again after 8 quiet ones). Nothing once the sequence has ended."""
        if self.ended:
            return
        self.steps.append((name, target, arg, on_thread, calls))
        done: list = []

        def work():
            try:
                done.append(CATALOG[name](self, target, arg))
            except Nothing:
                done.append(None)
            except BaseException as error:  # noqa: BLE001 - raised again on this thread
                done.append(error)

        if on_thread:
            worker = threading.Thread(target=work)
            worker.start()
            worker.join()
        else:
            work()
        if isinstance(done[0], BaseException):
            raise done[0]
        if done[0] is not None:
            self.log.append(done[0] + (" [on another thread]" if on_thread else ""))
        self.call(calls, "call")

    def call(self, n: int, what: str) -> None:
        self.log.append(f"{what} x{n}" if n > 1 else what)
        for _ in range(n):
            self.calls += 1
            for p in self.pipelines:
                if self.ended:
                    return
                self._check(p, self.held if self.held is not None else self.make_input())

    def _stale(self, p: Pipeline, problem: str) -> str:
        steps = "\n".join(f"  {i}. {line}" for i, line in enumerate(self.log, 1))
        return (f"{p.name} (compiled) disagrees with eager on call {self.calls}, after:\n{steps}\n"
                f"(gp.stats: {[gp.stats(c).compiles for c in p.objects]} compiles)\n{problem}")

    def _check(self, p: Pipeline, batch) -> None:
        """The compiled call against eager's; where they disagree, the oracle decides."""
        problem = self._disagreement(p, batch)
        if problem is None:
            return
        if self.plain:
            self.wrong.add((p.name, self.calls))
        elif self._torch_compile_wrong_too(p):
            self.ended = f"torch.compile is stale too on call {self.calls}: {problem.splitlines()[0]}"
            self.log.append(f"stopped: {self.ended}")
        else:
            raise AssertionError(self._stale(p, problem))

    def _disagreement(self, p: Pipeline, batch) -> Optional[str]:
        torch.manual_seed(SEED)
        try:
            expected = p.eager(batch)
        except Exception as error:  # noqa: BLE001 - eager refuses the change: the compiled call must too
            torch.manual_seed(SEED)
            try:
                p.compiled(batch)
            except type(error):
                return None
            except Exception as other:  # noqa: BLE001
                return f"eager raised {error!r}, the compiled call {other!r}"
            return f"eager raised {error!r}, the compiled call returned"
        torch.manual_seed(SEED)
        try:
            got = p.compiled(batch)
        except Exception as error:  # noqa: BLE001 - named with the sequence that led to it
            return f"the compiled call raised {error!r}"
        loose = self.spec.backend == "inductor" and expected.dtype in (torch.float16, torch.bfloat16)
        tolerance = {"atol": 2e-2, "rtol": 2e-2} if loose else {}
        try:
            torch.testing.assert_close(got, expected, **tolerance)
        except AssertionError as error:
            return str(error)
        return None

    def _torch_compile_wrong_too(self, p: Pipeline) -> bool:
        """Replays this sequence under plain ``torch.compile`` (a harness of its own: its own
        classes and code, so no cache entry of this one's is touched) up to this call: True when
        torch.compile disagrees with eager on the same call of the same pipeline."""
        oracle = Harness(self.spec, plain=True)
        try:
            for step in self.steps:
                if oracle.calls >= self.calls:
                    break
                oracle.change(*step)
        finally:
            oracle.close()
        return (p.name, self.calls) in oracle.wrong

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.stack.close()
        sys.modules.pop(self.mod.__name__, None)
        torch._dynamo.reset()


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
#: test_watch_runtime.py in the grammar's models; (id, spec, steps), a step being
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
