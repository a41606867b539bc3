"""``watch`` at run time (guardpolicy.runtime.watch, bindings/runtime/watch/watch_gate.h): under
``gp.compile`` a watched guard leaves torch's per-call check and is checked again only when
a dict it reads changes. Every change below is made after warm-up, under the shape of policy
``suggest`` writes (inputs and what no watcher sees kept, ``default watch``), on the normal
path and with direct dispatch, on ``eager`` and ``inductor``; the first call after it must
equal eager's (real compiles; ``torch.testing.assert_close``).

The change zoo: every change of docs/soundness.md's table (``tools.audit.changes.CHANGES``
on the audit model), and on a conv net with BatchNorm and Dropout: a forward hook and a
pre-hook on a submodule and their removal, a global forward hook, ``.half()`` and
``.to(torch.bfloat16)`` with a matching input, ``channels_last``, ``param.data =`` (same
shape, another dtype), a buffer replaced (same and another shape), a submodule of another
class, ``.train()``/``.eval()``, a config attribute, a module global, a class attribute and
a monkeypatched method. Then the C counter (no watched guard evaluated on an unchanged call)
and a change made from another thread.
"""

from __future__ import annotations

import copy
import threading
import types

import pytest
import torch
from torch import nn

import guardpolicy as gp
from config_models import SOURCE, OwnGetattribute
from guardpolicy.runtime import watch
from guardpolicy.runtime.torch_internals import inductor_fallback_random
from guardpolicy.tools.audit.changes import CHANGES, Trial
from guardpolicy.tools.audit.model import build_audit_model
from guardpolicy.tools.suggest import render

#: The rules ``suggest`` ends every policy with (render.watched_lines), nothing dropped.
WATCH = "guardpolicy 1\n\npolicy watched {\n" + "\n".join(render.watched_lines()) + "\n  default watch\n}\n"

CONFIG = types.SimpleNamespace(scale=1.0)  # a config object the forward reads
GAIN = 1.0  # a module global the forward reads


class Block(nn.Module):
    shift = 0.0  # a class attribute the forward reads

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.drop = nn.Dropout(0.5)

    def act(self, x):
        return torch.relu(x)

    def forward(self, x):
        return self.act(self.drop(self.bn(self.conv(x)))) + self.shift


class Net(nn.Module):
    def __init__(self, channels: int = 4):
        super().__init__()
        self.config = CONFIG
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.block = Block(channels)
        self.head = nn.Linear(channels, 5)
        self.register_buffer("offset", torch.zeros(channels))

    def forward(self, x):
        y = self.block(self.stem(x)) * self.config.scale * GAIN
        y = y + self.offset.view(1, -1, 1, 1)
        return self.head(y.mean((2, 3)))


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "watched.gpol"
    path.write_text(WATCH)
    return gp.load(path)


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def _check(compiled, model, x, what: str) -> None:
    """One call after a change: equal to eager's on a copy of the model as it is now (the
    copy's BatchNorm updates its own statistics in ``train()``), under the same seed; where
    eager raises, the compiled call must raise too."""
    reference = copy.deepcopy(model)
    torch.manual_seed(7)
    try:
        expected = reference(x)
    except RuntimeError as error:  # eager refuses the change: so must the compiled model
        with pytest.raises(type(error)):
            compiled(x)
        return
    torch.manual_seed(7)
    got = compiled(x)
    torch.testing.assert_close(got, expected, msg=lambda m: f"after {what}: {m}")


def _changes():
    """(what, change(model) -> the next input or None for the same) in the order applied."""
    global GAIN

    def hook_on(model):
        model.hooks = [model.block.conv.register_forward_hook(lambda m, a, out: out * 2),
                       model.head.register_forward_pre_hook(lambda m, args: (args[0] + 1,))]

    def hooks_off(model):
        for h in model.hooks:
            h.remove()

    def global_hook_on(model):
        model.global_hook = nn.modules.module.register_module_forward_hook(
            lambda m, a, out: out * 3 if isinstance(m, nn.Linear) else out)

    def set_gain(value):
        def change(model):
            global GAIN
            GAIN = value
        return change

    def patch_act(model):
        Block.act = lambda self, x: torch.sigmoid(x)

    return [
        ("a forward hook and a pre-hook on submodules", hook_on),
        ("the hooks removed", hooks_off),
        ("a global forward hook", global_hook_on),
        ("the global hook removed", lambda m: m.global_hook.remove()),
        ("a config attribute", lambda m: setattr(CONFIG, "scale", 2.0)),
        ("a module global", set_gain(0.5)),
        ("a class attribute", lambda m: setattr(Block, "shift", 1.0)),
        ("a monkeypatched method", patch_act),
        ("a buffer replaced, same shape", lambda m: setattr(m, "offset", torch.ones(4))),
        ("param.data = another tensor, same shape", lambda m: setattr(m.head.weight, "data", torch.ones(5, 4))),
        (".train()", lambda m: m.train()),
        (".eval()", lambda m: m.eval()),
        ("a submodule of another class", lambda m: setattr(m.block, "drop", nn.Identity())),
        ("channels_last", lambda m: m.to(memory_format=torch.channels_last)),
        ("a buffer of another shape", lambda m: setattr(m, "offset", torch.ones(1))),
        ("param.data = another dtype", lambda m: setattr(m.head.bias, "data", torch.zeros(5, dtype=torch.float64))),
    ]


@pytest.fixture
def restore_globals():
    yield
    global GAIN
    GAIN = 1.0
    CONFIG.scale = 1.0
    Block.shift = 0.0
    if "act" in vars(Block) and Block.act.__name__ == "<lambda>":
        Block.act = _ACT


_ACT = Block.act


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
    (a step counter, say): the second is checked again on every call, the first never (on
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
        assert gp.stats(c1).watches.rechecks == r1 and gp.stats(c2).watches.rechecks == r2 + 10
        first.block.shift_extra = 1  # its own dict: seen
        torch.testing.assert_close(c1(x), first(x))
        assert gp.stats(c1).watches.rechecks == r1 + 1


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
