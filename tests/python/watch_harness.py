"""The harness of test_watch_generated.py: one example's models (watch_models.py, loaded anew),
their compiled objects and eager oracles, the changes made (watch_catalog.CATALOG) and their
log; after every call the compiled result against eager's, and where they disagree, plain
``torch.compile`` replayed on the same sequence as the oracle (see test_watch_generated.py)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import sys
import threading
from typing import Callable, Optional

import torch
from hypothesis import strategies as st
from torch import nn

import guardpolicy as gp
from guardpolicy.runtime.torch_internals import inductor_fallback_random
from guardpolicy.tools.suggest import render
from watch_catalog import CATALOG, Nothing, fresh_models

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
