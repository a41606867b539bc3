"""How the mutation audit calls the model: every call from the same state with the same
random numbers, and nothing left changed afterwards.

``Session`` holds a ``mutation_state.Snapshot`` of the model, the call's inputs, the guarded
globals and torch's global module hooks, taken before the audit's first call. Every call runs
under ``torch.random.fork_rng`` with a fixed seed (and Python's ``random`` likewise), so
dropout in ``train()`` mode and ``torch.rand*`` in forward give the same numbers each time
and the caller's generators are left as they were; ``restore()`` puts the state back between
calls (a KV cache written in place, an embedding renormalised in place by ``max_norm``);
``check_repeatable`` calls eager twice from the same state and stops the audit when they
differ; ``finish`` restores, then compares everything with the snapshot and eager's output
with the first one, and raises ``AuditStateError`` (one line) if anything differs.
Importing this module does not import torch.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

from ..common.compare import compare
from . import written
from .state import AuditStateError, Snapshot

#: The seed every audited call runs under.
SEED = 0

__all__ = ["AuditStateError", "NotRepeatableError", "SEED", "Session", "seeded"]


class NotRepeatableError(RuntimeError):
    """Two eager calls of the model from the same state and seed differ."""


def seeded(fn: Callable[[], Any]) -> Any:
    """``fn()`` with torch's CPU generator and Python's ``random`` seeded with ``SEED``; both
    generators are as they were afterwards."""
    import torch

    state = random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        random.seed(SEED)
        try:
            return fn()
        finally:
            random.setstate(state)


_PLAIN = (int, float, bool, str, bytes, complex, type(None))


def detached(out: Any) -> Any:
    """``out`` with every tensor cloned (a returned view of state the audit restores would
    change under it); an object that is no tensor, number or string (a KV cache object a
    model returns) becomes the list of copies of the tensors it holds, so that what a call
    wrote into it is compared too."""
    import torch
    from ...runtime.torch_internals import tree_map

    def one(x: Any) -> Any:
        if isinstance(x, _PLAIN):
            return x
        if not isinstance(x, torch.Tensor):
            return [rec.saved for _, rec in Snapshot([("output", x)]).tensors]
        with torch.no_grad():
            c = x.detach().clone()
        return c.requires_grad_(True) if x.requires_grad and c.is_floating_point() else c

    return tree_map(one, out)


#: Buffers a BatchNorm updates by itself in ``train()``.
_BATCHNORM_STATS = ("running_mean", "running_var", "num_batches_tracked")


def next_step(diffs: list[str]) -> str:
    """What the user can do about state the audit could not put back (``finish``)."""
    if any(s in d for d in diffs for s in _BATCHNORM_STATS):
        return ("Next step: hand the model over in train() (its statistics are then state the model changes), or "
                "freeze its BatchNorm statistics (track_running_stats=False, or momentum=0.0)")
    return ("Next step: the model changes this state itself in a way the audit cannot record; hand over a model "
            "whose calls leave it as it was (.eval(), no in-place caches), or return that state from build() as "
            "an input")


class Session:
    """The audited call (a ``mutation_record.Call``) and the snapshot it is restored to."""

    def __init__(self, call: Any):
        from ...runtime.torch_internals import global_module_hooks

        self.call = call
        self.hooks = [(f"torch.nn.modules.module.{name}", d) for name, d in global_module_hooks()]
        self.state_s = 0.0  # time spent snapshotting and restoring
        self.constants: tuple = ()  # numbers the model's code compares with (mutation.model_constants)
        self.restores = 0
        self.call_bytes = 0  # what the model's own eager call allocates (trial_size.measure)
        self.eager_wrote: dict = {}  # what eager's call from the snapshot wrote (written.capture)
        self.unjudged: set = set()  # written state two eager calls leave different (written.unrepeatable)
        t0 = time.perf_counter()
        self.base = Snapshot(self._roots())
        self.state_s += time.perf_counter() - t0

    def _roots(self) -> list[tuple[str, Any]]:
        return [("model", self.call.fn), ("args", self.call.args), ("kwargs", self.call.kwargs), *self.hooks]

    def add_globals(self, scope: dict, names: list[str]) -> None:
        """Records the module globals ``names`` of ``scope`` (what guards on ``G[...]`` read)."""
        t0 = time.perf_counter()
        self.base.extend(bindings=[(f"global {n}", scope, n) for n in names])
        self.state_s += time.perf_counter() - t0

    def run(self, target: Callable) -> Any:
        """``target`` called on the inputs, seeded; the output detached from the state."""
        return detached(seeded(lambda: self.call.run(target)))

    def run_bounded(self, target: Callable) -> Any:
        """``run(target)`` within one trial's memory bound (``trial_size``: ``TrialTooLarge``
        before an op that would pass ``trial_size.limit_for(call_bytes)``)."""
        from . import trial_size

        limit = trial_size.limit_for(self.call_bytes)
        return detached(seeded(lambda: trial_size.bounded(lambda: self.call.run(target), limit)))

    def wrote(self, snap: Snapshot) -> dict:
        """What the last call wrote over ``snap`` (``written.capture``), timed in ``state_s``."""
        t0 = time.perf_counter()
        out = written.capture(snap)
        self.state_s += time.perf_counter() - t0
        return out

    def state_name(self, path: str) -> str:
        """A snapshot path as a report names it: the model's own state under the name of
        ``forward``'s first parameter (``self.step``) when the model is a module, as torch
        names its guards."""
        if self.call._self and (path == "model" or path.startswith(("model.", "model["))):
            arguments = self.call.bound.arguments if self.call.bound is not None else {}
            return next(iter(arguments), "self") + path[len("model"):]
        return path

    def snapshot(self) -> Snapshot:
        """The state now (with a trial's change made), sharing the base's tensor copies."""
        t0 = time.perf_counter()
        snap = Snapshot(self._roots(), base=self.base)
        self.state_s += time.perf_counter() - t0
        return snap

    def restore(self, snap: Snapshot | None = None) -> None:
        t0 = time.perf_counter()
        (snap or self.base).restore()
        self.restores += 1
        self.state_s += time.perf_counter() - t0

    def check_repeatable(self) -> Any:
        """Eager's output, after checking that two eager calls from the same state agree
        (``NotRepeatableError`` otherwise); sizes the call (``call_bytes``) and records what
        it wrote (``eager_wrote``) on the way. State the two calls wrote differently (a clock
        read) goes to ``unjudged``: the trials do not compare it."""
        from . import trial_size

        first, self.call_bytes = seeded(lambda: trial_size.measure(lambda: self.call.run(self.call.fn)))
        first = detached(first)
        self.eager_wrote = self.wrote(self.base)
        self.restore()
        second = self.run(self.call.fn)
        self.unjudged = written.unrepeatable(self.eager_wrote, self.wrote(self.base))
        self.restore()
        problem = compare(second, first)
        if problem is not None:
            raise NotRepeatableError(
                f"two eager calls of the model from the same state and seed differ ({problem}): the audit needs "
                "a repeatable call; put the model in .eval(), seed what it draws outside torch, or make build() "
                "return inputs the call does not keep state in")
        return first

    def finish(self, baseline: Any) -> None:
        """Restores, then fails (``AuditStateError``, one line) if the model or the inputs
        still differ from the snapshot, or eager no longer returns ``baseline``."""
        self.restore()
        diffs = self.base.differences()
        if not diffs:
            problem = compare(self.run(self.call.fn), baseline)
            self.restore()
            if problem is not None:
                diffs = [f"eager's output differs from before the audit ({problem})"]
        if diffs:
            self.restore()
            raise AuditStateError("guardpolicy audit: the audit left the model or its inputs changed (restored "
                                  "what it recorded): " + "; ".join(diffs) + ". " + next_step(diffs))
