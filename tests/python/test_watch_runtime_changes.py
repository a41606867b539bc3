"""``watch`` at run time (guardpolicy.runtime.watch, bindings/runtime/watch/watch_gate.h): under
``gp.compile`` a watched guard leaves torch's per-call check and is checked again only when
a dict it reads changes. Every change below is made after warm-up, under the shape of policy
``suggest`` writes (inputs and what no watcher sees kept, ``default watch``), on the normal
path and with direct dispatch, on ``eager`` and ``inductor``; the first call after it must
equal eager's (real compiles; ``torch.testing.assert_close``).

The change zoo: every change of docs/soundness.md's table (``tools.audit.changes.CHANGES``
on the audit model), and on a conv net with BatchNorm and Dropout (watch_runtime_harness.py):
a forward hook and a pre-hook on a submodule and their removal, a global forward hook,
``.half()`` and ``.to(torch.bfloat16)`` with a matching input, ``channels_last``,
``param.data =`` (same shape, another dtype), a buffer replaced (same and another shape), a
submodule of another class, ``.train()``/``.eval()``, a config attribute, a module global, a
class attribute and a monkeypatched method. Then a change made from another thread, the
changes torch itself serves stale, peft LoRA's ``set_adapter``, and objects replaced after
warm-up. The gate itself (its counter, what it holds) is test_watch_runtime_gate.py.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import guardpolicy as gp
import watch_runtime_harness
from guardpolicy.runtime.torch_internals import inductor_fallback_random
from guardpolicy.tools.audit.changes import CHANGES, Trial
from guardpolicy.tools.audit.model import build_audit_model
from watch_runtime_harness import CONFIG, Block, _changes, _check, _net

# The harness's fixtures, bound by name for pytest.
policy = watch_runtime_harness.policy
restore_globals = watch_runtime_harness.restore_globals


@pytest.mark.parametrize("dispatch", [None, "direct"])
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_every_change_after_warm_up_is_caught(policy, backend, dispatch, restore_globals):
    model = _net()
    compiled = gp.compile(model, policy, backend=backend, dispatch=dispatch)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad(), inductor_fallback_random():  # Dropout in train(): eager's random numbers
        for _ in range(10):  # warm-up: direct dispatch captures after 8 quiet calls
            _check(compiled, model, x, "warm-up")
        assert gp.stats(compiled).watches.frames, "nothing was watched"
        for what, change in _changes():
            change(model)
            _check(compiled, model, x, what)
            _check(compiled, model, x, what + " (second call)")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dispatch", [None, "direct"])
def test_half_and_bfloat16_with_a_matching_input(policy, dtype, dispatch):
    model = _net()
    compiled = gp.compile(model, policy, backend="eager", dispatch=dispatch)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        for _ in range(10):
            _check(compiled, model, x, "warm-up")
        model.to(dtype)
        _check(compiled, model, x.to(dtype), f"model.to({dtype})")
        model.float()
        _check(compiled, model, x, "back to float")


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.key)
def test_soundness_table_changes_under_watch(policy, change):
    model, inputs = build_audit_model("mlp")
    compiled = gp.compile(model, policy, backend="eager")
    trial = Trial(model, inputs, torch.no_grad)
    try:
        with torch.no_grad():
            for _ in range(3):
                compiled(*inputs)
        change.apply(trial)
        with trial.grad_mode():
            try:
                expected = model(*trial.inputs)
            except Exception:  # noqa: BLE001 - eager cannot run this change (n/a in the table)
                return
            got = compiled(*trial.inputs)
        torch.testing.assert_close(got, expected)
    finally:
        for undo in reversed(trial.undo):
            undo()


def test_a_change_from_another_thread_is_caught(policy, restore_globals):
    model = _net()
    compiled = gp.compile(model, policy, backend="eager")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        for _ in range(5):
            compiled(x)
        worker = threading.Thread(target=lambda: setattr(CONFIG, "scale", 3.0))
        worker.start()
        worker.join()
        _check(compiled, model, x, "a config attribute set on another thread")
    assert gp.stats(compiled).compiles == 2


def test_changes_torch_serves_stale_are_counted_and_the_watched_policy_catches_them(policy):
    from guardpolicy.tools import ignored_changes

    model = _net()
    x = torch.randn(2, 3, 8, 8)
    settings = {"no filter": lambda m: torch.compile(m, backend="eager"),
                "watched": lambda m: gp.compile(m, policy, backend="eager")}
    counted, missed = ignored_changes.outcomes(model, settings, lambda m, fn: fn(x),
                                               lambda a, b: torch.allclose(a, b))
    assert "Conv2d.forward patched" in counted  # torch.compile with no filter serves it stale
    assert missed == {"no filter": counted, "watched": []}
    assert Conv2d_forward_intact()


def Conv2d_forward_intact() -> bool:  # noqa: N802 - names the class it checks
    return "forward" in vars(nn.Conv2d) and nn.Conv2d.forward.__qualname__ == "Conv2d.forward"


@pytest.mark.parametrize("dispatch", [None, "direct"])
def test_peft_lora_set_adapter_under_watch(policy, dispatch):
    from pathlib import Path

    from guardpolicy.tools.common import model_spec

    built = model_spec.resolve(str(Path(__file__).resolve().parent / "models" / "peft_lora_model.py")).build()
    model, (x,) = built.fn, built.args
    compiled = gp.compile(model, policy, backend="eager", dispatch=dispatch)
    with torch.no_grad():
        for _ in range(10):
            torch.testing.assert_close(compiled(x), model(x))
        for adapter in ("b", "a", "b"):
            model.set_adapter(adapter)
            for _ in range(2):
                torch.testing.assert_close(compiled(x), model(x), msg=lambda m, a=adapter: f"set_adapter({a!r}): {m}")
    assert gp.stats(compiled).compiles <= 3  # a and b: each compiled once, switched back without a compile


class Gain:
    def __init__(self, mult: float):
        self.mult = mult


class WithParts(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = Gain(1.0)
        self.block = Block(4)
        self.head = nn.Linear(4, 5)

    def forward(self, x):
        return self.head(self.block(x).mean((2, 3))) * self.gain.mult


def test_objects_replaced_after_warm_up_are_watched_from_then_on(policy, restore_globals):
    """A submodule or config object replaced by an equal one passes the watched guards; the
    gate then watches the new one (found by a new user: it kept watching the old one)."""
    torch.manual_seed(0)
    model = WithParts().eval()
    compiled = gp.compile(model, policy, backend="eager")
    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        for _ in range(3):
            _check(compiled, model, x, "warm-up")
        model.gain.__dict__ = {"mult": 5.0}  # the object's __dict__ replaced: no dict changes
        _check(compiled, model, x, "gain.__dict__ replaced")
        model.gain = Gain(5.0)  # an equal object: served by the same entry, then watched
        _check(compiled, model, x, "an equal Gain")
        model.gain.mult = 2.0
        _check(compiled, model, x, "the new Gain's attribute")
        torch.manual_seed(1)
        model.block = Block(4).eval()  # a submodule of the same class: the same entry
        _check(compiled, model, x, "a new Block")
        model.block.shift_bias = 0.0
        model.block.bn.eps = 0.5  # an attribute of the new submodule
        _check(compiled, model, x, "the new Block's BatchNorm eps")
        handle = model.block.conv.register_forward_hook(lambda m, a, out: out * 2)
        _check(compiled, model, x, "a hook on the new Block's conv")
        handle.remove()
        _check(compiled, model, x, "the hook removed")
        fresh = Block(4).eval()
        fresh.conv.register_forward_hook(lambda m, a, out: out + 1)
        model.block = fresh  # arrives with a hook: its entry must not be served
        _check(compiled, model, x, "a new Block with a hook")
