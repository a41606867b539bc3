"""A group of roots read anew call after call goes hot (runtime/watch/hot.py, issue 48): its
calls are answered by torch's manager of its watched guards alone, with no walk of its
sources, until it holds still; only a group with no installed free tensor goes hot. Real
``torch.compile`` of a model reading an options dataclass built anew for each call (as
per-request options are), compared with eager on every call and with plain ``torch.compile``
for its compiles."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import guardpolicy as gp
from guardpolicy.runtime.watch import GroupPlan
from guardpolicy.runtime.watch.hot import HOT_AFTER, RETRY_FIRST, Hot


@dataclasses.dataclass
class Options:
    x: torch.Tensor
    scale: float

    def shifted(self, y):
        return y + 1.0


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])

    def forward(self, o):
        return o.shifted(self.body(o.x)) * o.scale


X = torch.randn(2, 8)


def test_a_group_goes_hot_after_rechecks_in_a_row_and_rechecks_again_on_its_retries():
    hot = Hot()
    rechecks, stretches, call = [], [], 1
    while call <= HOT_AFTER + 3 * RETRY_FIRST + 1:  # the gate's calls: a stretch answers its calls in C
        stretch = hot.stretch(call)
        (stretches.append((call, stretch)) if stretch else rechecks.append(call))
        call += max(stretch, 1)
    assert rechecks == [*range(1, HOT_AFTER + 1), HOT_AFTER + RETRY_FIRST, HOT_AFTER + 3 * RETRY_FIRST]
    # hot from call 9 to the first retry, then twice as long to each next one
    assert stretches == [(HOT_AFTER + 1, RETRY_FIRST - 1), (HOT_AFTER + RETRY_FIRST + 1, 2 * RETRY_FIRST - 1),
                         (HOT_AFTER + 3 * RETRY_FIRST + 1, 4 * RETRY_FIRST - 1)]
    assert hot.spells == 1 and hot.calls == 3
    assert hot.stretch(10_000) == 0 and hot.streak == 1  # a call served between: held still


def test_only_a_group_with_no_installed_tensor_may_go_hot():
    plan = GroupPlan({})
    assert not plan.may_go_hot  # no signature yet (not compiled)
    plan.signature = ((), (), (), (), ())
    assert plan.may_go_hot
    plan.signature = ((), (), (), (), (id(X),))  # a free tensor's identity: torch's guards do not compare it
    assert not plan.may_go_hot


def _run(compiled, model, scales):
    with torch.no_grad():
        for scale in scales:
            o = Options(X, scale)
            torch.testing.assert_close(compiled(o), model(o))


@pytest.mark.parametrize("dispatch", [None, "direct"])
def test_options_built_anew_per_call_go_hot_with_the_compiles_of_torch_compile(dispatch):
    scales = [1.0] * 40 + [2.0] * 20 + [1.0] * 20 + [2.0] * 20
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = Model().eval()
    plain = torch.compile(model, backend="eager")
    _run(plain, model, scales)
    torch_compiles = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    compiled = gp.compile(model, "watch_state", backend="eager", dispatch=dispatch)
    _run(compiled, model, scales)
    stats = gp.stats(compiled)
    assert stats.compiles == torch_compiles
    assert list(stats.watches.hot) == ["Model.forward (o)"] and stats.watches.hot["Model.forward (o)"] > 40
    explained = gp.explain(compiled)  # each hot group under the frame compiled with it
    assert sum(frame.hot.get("Model.forward (o)", 0) for frame in explained) == stats.watches.hot["Model.forward (o)"]
    assert all(set(frame.hot) <= {"Model.forward (o)"} for frame in explained)
    assert "hot {'Model.forward (o)': " in repr([frame for frame in explained if frame.hot][0])


def test_a_hot_group_is_as_safe_as_torch_compile_and_watched_again_once_it_holds_still():
    """While hot, the changes torch.compile answers right are answered right (torch's guards of
    the group). (A method of the options' class replaced is one torch.compile serves stale too,
    and so does a hot group: the signature, which sees it, is compared again once the group
    holds still; docs/design-notes/watch.md.)"""
    torch._dynamo.reset()
    model = Model().eval()
    compiled = gp.compile(model, "watch_state", backend="eager")
    _run(compiled, model, [1.0] * 30)
    assert gp.stats(compiled).watches.hot
    with torch.no_grad():
        odd = Options(X, 1.0)
        odd.shifted = lambda y: y - 1.0  # an instance attribute shadows the class's method
        torch.testing.assert_close(compiled(odd), model(odd))

        class Sub(Options):
            def shifted(self, y):
                return y * 3.0

        torch.testing.assert_close(compiled(Sub(X, 1.0)), model(Sub(X, 1.0)))
    _run(compiled, model, [1.0, 2.0, 1.0])
    held = Options(X, 1.0)  # the same object call after call: a retry's state then serves it
    gate = gp.stats(compiled).watches.frames[-1].gate
    with torch.no_grad():
        for _ in range(RETRY_FIRST * 4):
            torch.testing.assert_close(compiled(held), model(held))
        before = gate.rechecks
        for _ in range(50):
            compiled(held)
    assert gate.rechecks == before
