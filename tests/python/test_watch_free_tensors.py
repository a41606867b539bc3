"""Free tensors under ``watch`` (issue 41): with ``install_free_tensors`` the compiled code holds
a module's parameters and buffers themselves, so a parameter or buffer *replaced* after warm-up
(even by an equal one) is served stale by torch's recipe. Under ``default watch`` the
``_parameters``/``_buffers`` dicts are watched and the entry's signature holds each tensor's
identity: every change below, made after warm-up, gives eager's result on the next call, on
the normal path and with direct dispatch, on ``eager`` (and ``inductor`` for a subset). The
same holds for every other tensor Dynamo installs (a plain tensor attribute, one in a config
object, a dict or a list the module holds, a module global): each replaced by a tensor of the
same shape and other values (what torch's ``install_free_tensors`` alone serves stale).
"""

from __future__ import annotations

import enum
import types

import pytest
import torch
from torch import nn

import guardpolicy as gp

class Key(enum.Enum):
    A = 1


POLICY = "guardpolicy 1\n\npolicy w {\n  default watch\n  config install_free_tensors = true\n}\n"
OFFSET = torch.zeros(3)  # a module global the forward reads


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.lin = nn.Linear(2, 3)
        self.register_buffer("shift", torch.zeros(3))
        self.gain = torch.ones(3)  # tensors that are neither parameters nor buffers
        self.cfg = types.SimpleNamespace(bias=torch.zeros(3))
        self.table = {"bias": torch.zeros(3)}
        self.taps = [torch.zeros(3)]
        self.pair = (torch.zeros(3), (torch.zeros(3),))  # a tensor in a tuple, and in a tuple in it
        self.keyed = {("a", 1): torch.zeros(3), Key.A: torch.zeros(3)}  # keys neither str nor int

    def forward(self, x):
        y = (self.lin(self.conv(x).mean((2, 3))) + self.shift) * self.gain
        return y + self.cfg.bias + self.table["bias"] + self.taps[0] + OFFSET + self.pair[0] + self.pair[1][0] + self.keyed["a", 1] + self.keyed[Key.A]


def _global_replaced(m):
    global OFFSET
    OFFSET = torch.full((3,), 2.0)


def _param_replaced(m):
    m.lin.weight = nn.Parameter(torch.randn(3, 2))


def _param_equal(m):
    m.lin.bias = nn.Parameter(m.lin.bias.detach().clone() + 1)


CHANGES = {
    "a parameter replaced": (_param_replaced, None),
    "a parameter replaced by one of other values": (_param_equal, None),
    "param.data, same shape": (lambda m: setattr(m.lin.weight, "data", torch.randn(3, 2)), None),
    "a buffer replaced, same shape": (lambda m: setattr(m, "shift", torch.ones(3)), None),
    "a buffer replaced, another shape": (lambda m: setattr(m, "shift", torch.ones(1)), None),
    "a buffer changed in place": (lambda m: m.shift.add_(2), None),
    "a buffer set to 0": (lambda m: m.shift.zero_(), None),
    "requires_grad off": (lambda m: m.lin.weight.requires_grad_(False), None),
    ".half() with a half input": (lambda m: m.half(), torch.float16),
    "channels_last": (lambda m: m.conv.to(memory_format=torch.channels_last), None),
    "a tensor attribute replaced, same shape": (lambda m: setattr(m, "gain", torch.full((3,), -1.0)), None),
    "a config object's tensor replaced": (lambda m: setattr(m.cfg, "bias", torch.ones(3)), None),
    "a dict's tensor replaced": (lambda m: m.table.__setitem__("bias", torch.ones(3)), None),
    "a list's tensor replaced": (lambda m: m.taps.__setitem__(0, torch.ones(3)), None),
    "a module global tensor replaced": (_global_replaced, None),
    "a tuple's tensor replaced (a new tuple)": (lambda m: setattr(m, "pair", (torch.ones(3), m.pair[1])), None),
    "a nested tuple's tensor changed in place": (lambda m: m.pair[1][0].add_(1), None),
    "a tuple's tensor's .data replaced, same shape": (lambda m: setattr(m.pair[0], "data", torch.ones(3)), None),
    "a tuple's tensor's .data replaced, another shape": (lambda m: setattr(m.pair[0], "data", torch.ones(1)), None),
    "a tensor at a tuple key replaced": (lambda m: m.keyed.__setitem__(("a", 1), torch.ones(3)), None),
    "a tensor at an enum key replaced": (lambda m: m.keyed.__setitem__(Key.A, torch.ones(3)), None),
}
INDUCTOR = ("a parameter replaced", "a buffer replaced, same shape", ".half() with a half input",
            "a tensor attribute replaced, same shape", "a module global tensor replaced")


def _cases():
    for backend in ("eager", "inductor"):
        for what in CHANGES:
            if backend == "eager" or what in INDUCTOR:
                for dispatch in (None, "direct"):
                    marks = [pytest.mark.soak] if backend == "inductor" else []  # make test's alone
                    yield pytest.param(backend, dispatch, what, id=f"{backend}-{dispatch}-{what}", marks=marks)


def _caught(policy: str, backend: str, dispatch: str | None, what: str) -> None:
    """``Net`` compiled under ``policy``, warmed up, changed as ``what`` says: the next two
    calls give eager's result."""
    global OFFSET
    torch._dynamo.reset()
    torch.manual_seed(0)
    OFFSET = torch.zeros(3)
    model = Net().eval()
    x = torch.randn(2, 2, 4, 4)
    change, dtype = CHANGES[what]
    with torch.no_grad():
        compiled = gp.compile(model, gp.load(policy), backend=backend, dispatch=dispatch)
        for _ in range(10):
            compiled(x)
        change(model)
        y = x.to(dtype) if dtype is not None else x
        torch.testing.assert_close(compiled(y), model(y), msg=lambda m: f"after {what}: {m}")
        torch.testing.assert_close(compiled(y), model(y), msg=lambda m: f"after {what}, again: {m}")


@pytest.mark.parametrize(("backend", "dispatch", "what"), list(_cases()))
def test_a_parameter_or_buffer_change_after_warm_up_is_caught(backend, dispatch, what):
    _caught(POLICY, backend, dispatch, what)


class Pairs(nn.Module):
    """Tensors in a tuple, in a tuple in it, and in a dict at a tuple key and an enum key."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.pair = (torch.zeros(3), (torch.ones(3),))
        self.keyed = {("a", 1): torch.full((3,), 2.0), Key.A: torch.full((3,), 3.0)}

    def forward(self, x):
        return self.lin(x) + self.pair[0] + self.pair[1][0] + self.keyed["a", 1] + self.keyed[Key.A]


def test_tensors_held_in_tuples_compile_once_as_under_torch_compile():
    """A tuple is immutable: its tensors are replaced only with it (its owner's dict changes), so
    they are installed and watched like a dict's; no cache entry is retired for them. A dict
    item Dynamo reads by its key's position (``ConstDictKeySource``: an enum member) is held at
    that key."""
    compiles = {}
    for name, compile_ in (("torch.compile", lambda m: torch.compile(m, backend="eager")),
                           ("watch_state", lambda m: gp.compile(m, "watch_state", backend="eager"))):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        model, x = Pairs().eval(), torch.randn(2, 3)
        with torch.no_grad():
            compiled = compile_(model)
            for _ in range(5):
                torch.testing.assert_close(compiled(x), model(x))
        compiles[name] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        if name == "watch_state":
            assert not gp.stats(compiled).watches.unwatched
    assert compiles == {"torch.compile": 1, "watch_state": 1}


@pytest.fixture(scope="module")
def suggested_net() -> str:
    """``gp.suggest``'s policy for ``Net`` (eager audit): parameters and buffers as free
    tensors, no tensor guard of the model dropped."""
    torch.manual_seed(0)
    with torch.no_grad():
        return gp.suggest(Net().eval(), torch.randn(2, 2, 4, 4), backend="eager").text


def test_suggest_writes_free_tensors_and_drops_no_tensor_guard_of_the_model(suggested_net):
    policy = gp.load(suggested_net)
    assert policy.config == {"install_free_tensors": True}
    assert "  config install_free_tensors = true" in suggested_net.splitlines()
    drops = [line for line in suggested_net.splitlines() if line.strip().startswith("drop ")]
    assert drops and not [line for line in drops if "TENSOR_MATCH" in line], drops


@pytest.mark.parametrize("what", list(CHANGES))
def test_the_suggested_policy_catches_each_change_with_free_tensors(suggested_net, what):
    _caught(suggested_net, "eager", "direct", what)


class Recurrent(nn.Module):
    """``h = tanh(inp(x) + rec(h))``, its state ``h`` ``(1, 4)`` a plain tensor attribute
    reassigned on every call (a streaming model, a hand-written cache)."""

    def __init__(self):
        super().__init__()
        self.inp, self.rec = nn.Linear(4, 4), nn.Linear(4, 4)
        self.h = torch.zeros(1, 4)

    def forward(self, x):
        self.h = torch.tanh(self.inp(x) + self.rec(self.h))
        return self.h


class RecurrentPair(Recurrent):
    """``Recurrent`` whose state is held in a tuple, ``(h,)``, a new tuple on every call."""

    def __init__(self):
        super().__init__()
        self.h = (torch.zeros(1, 4),)

    def forward(self, x):
        self.h = (torch.tanh(self.inp(x) + self.rec(self.h[0])),)
        return self.h[0]


@pytest.mark.parametrize("cls", [Recurrent, RecurrentPair], ids=["attribute", "in a tuple"])
def test_a_state_tensor_reassigned_on_every_call_compiles_once_more_not_per_call(cls):
    """A graph holds its free tensors: the first replacement makes the code's later compiles
    pass them as graph inputs (``watch.MOVED_TENSORS``) instead of compiling once per tensor
    up to torch's recompile limit, then running eager."""
    from guardpolicy.runtime import watch

    torch.manual_seed(0)
    model, twin = cls(), cls()
    twin.load_state_dict(model.state_dict())
    compiled = gp.compile(model, gp.load(POLICY), backend="eager")
    with torch.no_grad():
        for step in range(20):
            x = torch.randn(1, 4)
            torch.testing.assert_close(compiled(x), twin(x), msg=lambda m, step=step: f"step {step}: {m}")
    stats = gp.stats(compiled)
    assert stats.compiles == 2 and not stats.eager_fallbacks, (stats.compiles, stats.eager_fallbacks)
    assert cls.forward.__code__ in watch.MOVED_TENSORS
    torch.compiler.reset()  # a fresh start installs free tensors again
    frame = types.SimpleNamespace(f_code=cls.forward.__code__, f_locals={"self": model})
    assert stats.config_for(frame) == {"install_free_tensors": True}


def test_weights_reloaded_over_many_static_shapes_leave_no_shape_eager():
    """``dynamic=False``, eight batch sizes warmed up (eight cache entries holding the installed
    parameters: torch's ``recompile_limit``), then ``load_state_dict(assign=True)`` twice: each
    entry that fails leaves the limit's count at once (``torch_internals.uncount``) and is
    retired after its recompile (``watch.STALE_ENTRIES``), so no recompile is refused and no
    shape is left eager; once moved, the parameters are graph inputs and the second reload
    compiles nothing."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    xs = [torch.randn(b, 4) for b in range(1, 9)]
    compiled = gp.compile(model, "watch_state", backend="eager", dynamic=False)
    compiles = []
    with torch.no_grad():
        for scale in (None, 2.0, 0.5):
            if scale is not None:
                model.load_state_dict({k: v * scale for k, v in model.state_dict().items()}, assign=True)
            for _ in range(2):
                for x in xs:
                    torch.testing.assert_close(compiled(x), model(x), msg=lambda m, x=x, s=scale: f"{s}, {len(x)}: {m}")
            compiles.append(gp.stats(compiled).compiles)
    assert compiles == [8, 16, 16] and not gp.stats(compiled).eager_fallbacks, (compiles, gp.stats(compiled).eager_fallbacks)


def _scale_by(module, args, kwargs, scale=None):
    return args, dict(kwargs, scale=scale)


class ScaledBy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.extra = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, scale=None):
        return scale(self.lin(x))


class HoldsScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.l, self.l2 = ScaledBy(), ScaledBy()

    def forward(self, x):
        return self.l(x)


@pytest.mark.parametrize("change", ["parameter replaced", "another module"])
def test_an_installed_tensor_reached_through_state_the_watch_cannot_see_is_never_served_stale(change):
    """A module held in a ``functools.partial`` pre-hook's keywords: the watch cannot see a
    partial (not a kind of the allowlist), so the TENSOR_MATCH of that module's parameters
    stays checked, and torch's compares metadata only. Installed as free tensors they were
    served stale after a replacement, where ``torch.compile`` was right (found by a tester);
    the entry is retired after its first call and the code compiled again with them as graph
    inputs: one more compile than ``torch.compile``, never a stale call."""
    import functools

    def sequence(model, call):
        wrong, target = [], model.l.extra
        handle = model.l.register_forward_pre_hook(functools.partial(_scale_by, scale=target), with_kwargs=True)
        with torch.no_grad():
            for i in range(12):
                if i == 4:
                    handle.remove()
                    if change == "parameter replaced":
                        model.l.extra.weight = nn.Parameter(torch.ones(4, 4))
                    else:
                        target = model.l2.extra
                    handle = model.l.register_forward_pre_hook(functools.partial(_scale_by, scale=target),
                                                               with_kwargs=True)
                x = torch.randn(3, 4)
                if not torch.allclose(call(x), model(x)):
                    wrong.append(i)
        return wrong

    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = HoldsScaled()
    assert sequence(model, torch.compile(model, backend="eager")) == []
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = HoldsScaled()
    compiled = gp.compile(model, gp.load(POLICY), backend="eager")
    assert sequence(model, compiled) == []
    assert gp.stats(compiled).compiles == 2
    from guardpolicy.runtime import watch

    assert HoldsScaled.forward.__code__ in watch.MOVED_TENSORS


class _Scale:
    """A forward hook object holding a tensor (installed as a free tensor): the output times ``s``."""

    def __init__(self, s):
        self.s = s

    def __call__(self, module, args, out):
        return out * self.s


@pytest.mark.parametrize("dispatch", [None, "direct"])
@pytest.mark.parametrize("hold", ["attribute", "module buffer"])
def test_a_hook_holding_a_tensor_replaced_by_another_of_its_class_is_caught(hold, dispatch):
    """The signature compares a hook by its class (``_hook_token``); its installed tensor is held
    by the hook object, and the hook by its dict: one replaced makes the state be built anew,
    whose signature holds the new tensor (found by a tester: served stale, where torch.compile
    was right)."""
    def hook(value):
        if hold == "attribute":
            return _Scale(torch.full((4,), value))
        scale = nn.Module()
        scale.register_buffer("s", torch.full((4,), value))
        return lambda module, args, out: out * scale.s
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)]).eval()
    handles = [layer.register_forward_hook(hook(1.0)) for layer in model]
    compiled = gp.compile(model, "watch_state", backend="eager", dispatch=dispatch)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(12):
            torch.testing.assert_close(compiled(x), model(x))
        model[1]._forward_hooks[handles[1].id] = hook(3.0)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), msg=lambda m: f"after the hook replaced: {m}")
