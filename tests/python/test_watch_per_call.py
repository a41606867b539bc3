"""State that changes on every call, the way torch's own utilities change it after warm-up
(issue 48): ``prune`` and ``spectral_norm`` (a forward pre-hook assigns ``weight`` on every
call), a parametrization (``weight`` computed on every read), ``functional_call`` with the
model's parameters or other ones. Each is applied to a model compiled under ``watch_state``
(both paths) after warm-up; every call is compared with eager on the same model, including
after the state behind the change moves (a pruning mask, the original weight, other
parameters, ``train()``; in place and replaced, while the group is hot), with plain
``torch.compile`` as the oracle: a call it answers right is answered right, and
``watch_state`` compiles no more than it does on the same sequence but for a replaced
installed tensor (``REPLACED``).
(``spectral_norm`` in ``train()``, whose hook updates its vectors in place on every call, is
one torch.compile serves stale: listed in ``TORCH_STALE``, checked to stay so.) The per-call
cost of each: bench/bench_per_call_changes.py."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.utils.parametrize
import torch.nn.utils.prune
from torch import nn

import guardpolicy as gp

X = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)]).eval()


class Doubled(nn.Module):
    def forward(self, w):
        return w * 2.0


def _replace(module, name, value):
    """``module.<name> = value``: a parameter or buffer replaced (``load_state_dict(assign=True)``
    does the same), not changed in place."""
    return lambda: setattr(module, name, value)


def _prune(m):
    torch.nn.utils.prune.l1_unstructured(m[0], "weight", amount=0.3)
    return [lambda: m[0].weight_mask.zero_(), lambda: m[0].weight_orig.mul_(2.0),
            _replace(m[2], "bias", nn.Parameter(torch.randn(8))),
            _replace(m[0], "weight_orig", nn.Parameter(torch.randn(8, 8))),
            _replace(m[0], "weight_mask", torch.ones(8, 8)),
            lambda: torch.nn.utils.prune.remove(m[0], "weight")]


def _spectral(m):
    torch.manual_seed(1)
    torch.nn.utils.spectral_norm(m[1])
    return [lambda: m[1].weight_orig.mul_(3.0), _replace(m[1], "weight_orig", nn.Parameter(torch.randn(8, 8))),
            _replace(m[0], "weight", nn.Parameter(torch.randn(8, 8))), lambda: m.train(), lambda: m.eval()]


def _parametrized(m):
    torch.nn.utils.parametrize.register_parametrization(m[2], "weight", Doubled())
    return [lambda: m[2].parametrizations.weight.original.mul_(-1.0),
            lambda: torch.nn.utils.parametrize.remove_parametrizations(m[2], "weight")]


#: name -> apply(model) -> the later moves of the state behind the change, in order
CHANGES = {"prune": _prune, "spectral_norm": _spectral, "parametrization": _parametrized}


def _sequence(compiled, model, change, eager_model=None):
    """Warm-up, the change, then 6 calls after each later move, every call against eager;
    returns the calls that disagreed (none, for ``watch_state``)."""
    wrong = []
    torch.manual_seed(2)  # spectral_norm in train() draws: the same in both
    with torch.no_grad():
        for _ in range(10):
            compiled(X)
        moves = CHANGES[change](model)
        for i, move in enumerate([lambda: None, *moves]):
            move()
            for j in range(6):
                state = torch.random.get_rng_state()
                expected = model(X)
                torch.random.set_rng_state(state)
                if not torch.allclose(compiled(X), expected, atol=1e-5):
                    wrong.append((i, j))
    return wrong


#: The calls (move, call after it) plain torch.compile serves stale: spectral_norm in train().
TORCH_STALE = {"prune": [], "spectral_norm": [(4, j) for j in range(4)], "parametrization": []}


#: The compiles ``watch_state`` makes beyond torch.compile's on the sequence: a graph holding
#: an installed tensor that was replaced (``_replace``) compiles again, once per code (its later
#: compiles pass the tensors as inputs, as torch.compile does); prune's second is its
#: ``remove``, which makes the replaced ``weight_orig`` the weight, where torch.compile serves
#: its first graph again.
REPLACED = {"prune": 2, "spectral_norm": 1, "parametrization": 0}


#: The groups that go hot in the sequence (hot.py): the model's, whose dicts the hook writes
#: on every call (torch compiles a built-in module's call through ``wrap_inline``); a
#: parametrization computes ``weight`` on every read and writes no dict.
HOT = {"prune": ["wrap_inline.<locals>.inner (fn)"], "spectral_norm": ["wrap_inline.<locals>.inner (fn)"],
       "parametrization": []}


def _under_torch_compile(change: str) -> tuple[list, int]:
    """The calls plain ``torch.compile`` gets wrong on the sequence, and its compiles."""
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    model = mlp()
    wrong = _sequence(torch.compile(model, backend="eager"), model, change)
    return wrong, counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("dispatch", [None, "direct"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_state_changed_on_every_call_is_served_right_with_no_more_compiles(change, dispatch):
    torch_wrong, limit = _under_torch_compile(change)
    assert torch_wrong == TORCH_STALE[change]
    torch._dynamo.reset()
    model = mlp()
    compiled = gp.compile(model, "watch_state", backend="eager", dispatch=dispatch)
    assert set(_sequence(compiled, model, change)) <= set(torch_wrong)
    assert gp.stats(compiled).compiles == limit + REPLACED[change]
    # rechecked call after call (its dicts written by the hook), the model's group goes hot
    # where its state holds its installed tensors, and stays right through the moves above
    assert list(gp.stats(compiled).watches.hot) == HOT[change]


@pytest.mark.parametrize("dispatch", [None, "direct"])
def test_functional_call_with_the_models_or_other_parameters(dispatch):
    """``torch.func.functional_call(compiled, params, x)``: the model's own parameters, then
    another set on every other call (a second set of weights served by one compiled model)."""
    torch._dynamo.reset()
    model = mlp()
    compiled = gp.compile(model, "watch_state", backend="eager", dispatch=dispatch)
    own = dict(model.named_parameters())
    other = {k: v * 0.5 for k, v in copy.deepcopy(own).items()}
    with torch.no_grad():
        for _ in range(10):
            compiled(X)
        for i in range(12):
            params = own if i % 2 else other
            got = torch.func.functional_call(compiled, params, (X,))
            torch.testing.assert_close(got, torch.func.functional_call(model, params, (X,)))
        torch.testing.assert_close(compiled(X), model(X))  # the model's own parameters again, outside


def _scaled_input(module, args, scale):
    return (args[0] * scale[0],)


class _Scaler:
    def scaled(self, module, args, scale):
        return (args[0] * scale[0],)


_SCALER = _Scaler()


@pytest.mark.parametrize("of", [_scaled_input, _SCALER.scaled], ids=["a function", "a bound method"])
def test_a_partial_hook_made_anew_on_every_call(of):
    """A forward pre-hook that is a new ``functools.partial`` on every call, registered before
    the call and removed after (PEFT's ``adapter_names``): no more compiles than plain
    ``torch.compile`` (which guards a partial part by part), and a changed keyword is caught."""
    import functools

    def sequence(model, call):
        wrong = []
        with torch.no_grad():
            for i, scale in enumerate([2.0] * 6 + [3.0] * 3 + [2.0] * 2):
                handle = model[0].register_forward_pre_hook(functools.partial(of.__func__.__get__(of.__self__)
                                                                              if hasattr(of, "__self__") else of,
                                                                              scale=[scale]))
                try:
                    if not torch.allclose(call(X), model(X)):
                        wrong.append(i)
                finally:
                    handle.remove()
        return wrong

    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    counters.clear()
    model = mlp()
    assert sequence(model, torch.compile(model, backend="eager")) == []
    torch_graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    counters.clear()
    model = mlp()
    compiled = gp.compile(model, "watch_state", backend="eager")
    assert sequence(model, compiled) == []
    assert gp.stats(compiled).compiles == counters["stats"]["unique_graphs"] == torch_graphs == 2
