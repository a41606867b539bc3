"""Direct dispatch (``gp.compile(..., dispatch="direct")``) with real torch.compile runs: the
outputs of the normal path, and the fallbacks and refusals with their reasons: a graph break, a
failing kept guard (it recompiles, then direct dispatch resumes), ``torch._dynamo.reset()``
mid-run, an invalidated cache entry, module hooks, a new forward of the module, global state,
a stance."""

import types

import pytest
import torch

import guardpolicy as gp
from dispatch_harness import NN, WARMUP, Doubler, direct, fresh, scaled, warm
from guardpolicy.runtime import torch_internals
from guardpolicy.runtime.call import dispatch
from guardpolicy.tools.common.models import build, output_tensor
from guardpolicy.tools.latency import own_class, own_class_copy


def model_inputs(name, count):
    """``count`` inputs of the demo model ``name``'s example shape, different values each."""
    _, (example,) = build(name)
    gen = torch.Generator().manual_seed(1)
    if example.dtype == torch.long:
        return [torch.randint(0, 256, example.shape, generator=gen) for _ in range(count)]
    return [torch.randn(example.shape, generator=gen) for _ in range(count)]


@pytest.mark.soak
@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("name", ["mlp", "gpt2"])
def test_outputs_equal_the_normal_path_over_1000_calls(name, backend):
    model, _ = build(name)
    normal = gp.compile(own_class_copy(model), gp.load_std(NN), backend=backend)
    fast = direct(own_class_copy(model), backend=backend)
    inputs = model_inputs(name, 1000)
    with torch.no_grad():
        for x in inputs:
            assert torch.equal(output_tensor(fast(x)), output_tensor(normal(x)))
    d = gp.stats(fast).dispatch
    assert d.state == "direct" and d.refusals == []
    assert d.direct_calls == 1000 - WARMUP - 1  # warm-up, then the capturing call, then direct
    assert sum(d.fallbacks.values()) == 0
    assert gp.stats(fast).compiles == 1 and gp.stats(fast).calls == 1000


class Breaks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc(x)
        torch._dynamo.graph_break()
        return torch.relu(x) * 2


def test_the_direct_module_keeps_its_state_off_the_original_module():
    """What a direct module's ``__call__`` reads is the wrapper's own (torch's
    ``OptimizedModule.__setattr__`` would set it on the original module, and every call would
    then find it through ``__getattr__``)."""
    model = torch.nn.Linear(4, 4)
    fast = direct(model)
    assert "_guardpolicy_dispatch" in fast.__dict__
    assert not [name for name in vars(model) if name.startswith("_guardpolicy")]


def test_a_graph_break_is_refused_with_its_reason_and_outputs_stay_equal():
    torch.manual_seed(0)
    model = Breaks().eval()
    fast = direct(model)
    inputs = [torch.randn(2, 8) for _ in range(1000)]
    with torch.no_grad():
        for x in inputs:
            assert torch.equal(fast(x), model(x))
    d = gp.stats(fast).dispatch
    assert d.state == "refused" and d.direct_calls == 0
    assert len(d.refusals) == 1
    assert d.refusals[0].reason.startswith("graph break: the code of cache entry 0/0 continues in __resume_at_")
    assert d.refusals[0].frame.startswith("forward at ") and __file__ in d.refusals[0].frame


def test_an_entry_of_another_backend_is_passed_over_as_torch_passes_it_over():
    """Another object of the class compiled with another backend adds its entries to the same
    code; torch's lookup never serves them to this object, and direct dispatch captures past them."""
    torch.manual_seed(0)
    twice = own_class(Doubler)  # one class of the two objects, its forward code of its own
    ours, other = twice().eval(), twice().eval()
    fast = direct(ours)
    x = torch.randn(2, 4)
    with torch.no_grad():
        warm(fast, x)
        theirs = torch.compile(other, backend="aot_eager")
        for _ in range(WARMUP + 4):
            assert torch.equal(fast(x), ours(x))
            assert torch.equal(theirs(x), other(x))
    d = gp.stats(fast).dispatch
    assert d.refusals == [] and d.state == "direct" and d.direct_calls >= 2
    assert len(torch_internals.cache_entries_of(twice.forward)) == 2


def test_a_failing_kept_guard_falls_back_recompiles_and_direct_resumes():
    fast = direct(fresh(scaled), std="keep_tensor_guards", dynamic=False)
    small, big = torch.randn(4), torch.randn(6)
    warm(fast, small)
    d, st = gp.stats(fast).dispatch, gp.stats(fast)
    assert d.state == "direct" and st.compiles == 1
    before = d.direct_calls
    assert torch.equal(fast(big), scaled(big))  # TENSOR_MATCH on x (kept) fails: normal path
    assert d.fallbacks[dispatch.KEPT_GUARD_FAILED] == 1 and d.direct_calls == before
    assert st.compiles == 2 and d.state == "warm-up"
    for i in range(WARMUP + 4):
        x = big if i % 2 else small
        assert torch.equal(fast(x), scaled(x))
    assert d.state == "direct" and d.captures == 2 and st.compiles == 2
    assert d.direct_calls > before and d.fallbacks[dispatch.KEPT_GUARD_FAILED] == 1


def test_reset_mid_run_drops_the_captured_code_and_direct_resumes_after_a_recompile():
    fast = direct(fresh(scaled))
    x = torch.randn(5)
    warm(fast, x)
    d = gp.stats(fast).dispatch
    assert d.state == "direct"
    calls = d.direct_calls
    torch._dynamo.reset()
    assert torch.equal(fast(x), scaled(x))
    assert d.direct_calls == calls  # the freed entry's code did not run
    assert d.fallbacks[dispatch.ENTRY_GONE] == 1 and gp.stats(fast).compiles == 2
    warm(fast, x, calls=WARMUP + 3)
    assert d.state == "direct" and d.direct_calls > calls


def test_an_invalidated_entry_is_never_called():
    fast = direct(fresh(scaled))
    x = torch.randn(5)
    warm(fast, x)
    d = gp.stats(fast).dispatch
    calls = d.direct_calls
    entry = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(fast.__wrapped__.__code__)[0]
    manager = entry.guard_manager
    # what torch does when an ID_MATCH'd object dies (CheckFunctionManager.invalidate)
    manager.extra_state.invalidate(entry, torch._dynamo.guards.DeletedGuardManagerWrapper("test"))
    assert torch.equal(fast(x), scaled(x))
    assert d.direct_calls == calls and d.fallbacks[dispatch.ENTRY_GONE] == 1
    assert gp.stats(fast).compiles == 2


def test_module_hooks_take_the_normal_path_and_run():
    torch.manual_seed(0)
    model = Doubler().eval()
    fast = direct(model)
    x = torch.randn(3, 4)
    with torch.no_grad():
        warm(fast, x)
        assert gp.stats(fast).dispatch.state == "direct"
        handle = model.register_forward_hook(lambda mod, args, out: out + 100)
        assert torch.equal(fast(x), model(x))
        assert fast(x).min() > 50  # the hook ran
        handle.remove()  # (the hook's own frame was compiled: warm-up again)
        warm(fast, x)
        assert torch.equal(fast(x), model(x))
    d = gp.stats(fast).dispatch
    assert d.fallbacks[dispatch.MODULE_HOOKS] == 2 and d.state == "direct"


class Tripler(Doubler):
    def forward(self, x):
        return self.fc(x) * 3


def tripled(self, x):
    return self.fc(x) * 3


DEFAULT_KEEP = "guardpolicy 1\npolicy keep_all {\n  default keep\n}\n"


def _set_forward(model):
    model.forward = types.MethodType(tripled, model)


def _del_forward(model):
    del model.forward


def _set_class(cls):
    def change(model):
        model.__class__ = cls
    return change


@pytest.mark.parametrize("policy", [NN, DEFAULT_KEEP])
@pytest.mark.parametrize("change, back", [(_set_forward, _del_forward), (_set_class(Tripler), _set_class(Doubler))],
                         ids=["instance_forward", "class"])
def test_a_new_forward_of_the_module_takes_the_normal_path_both_ways(policy, change, back):
    torch.manual_seed(0)
    model = Doubler().eval()
    fast = gp.compile(model, gp.load_std(policy) if policy == NN else gp.load(policy),
                      backend="eager", dispatch="direct")
    st, d = gp.stats(fast), gp.stats(fast).dispatch
    x = torch.randn(3, 4)
    with torch.no_grad():
        warm(fast, x)
        assert d.state == "direct" and st.compiles == 1
        change(model)
        calls = d.direct_calls
        out = fast(x)  # right after the change: the normal path, which compiles the new forward
        assert torch.equal(out, model(x)) and torch.equal(out, model.fc(x) * 3)
        assert d.direct_calls == calls and d.fallbacks[dispatch.FORWARD_CHANGED] == 1
        assert st.compiles == 2 and d.state == "warm-up"
        warm(fast, x)  # the new forward is captured and dispatched directly
        assert d.state == "direct" and d.direct_calls > calls
        assert torch.equal(fast(x), model.fc(x) * 3)
        back(model)
        calls = d.direct_calls
        out = fast(x)  # the old forward again: the normal path serves its cache entry
        assert torch.equal(out, model(x)) and torch.equal(out, model.fc(x) * 2)
        assert d.direct_calls == calls and d.fallbacks[dispatch.FORWARD_CHANGED] == 2
        assert st.compiles == 2 and d.state == "direct"  # nothing compiled: captured again at once
        assert torch.equal(fast(x), model.fc(x) * 2) and d.direct_calls == calls + 1
    assert d.refusals == []


def test_a_dropped_global_state_guard_sends_no_grad_calls_to_the_normal_path():
    torch.manual_seed(0)
    model = Doubler()
    fast = direct(model, std="keep_tensor_guards")
    x = torch.randn(3, 4)
    warm(fast, x)
    d = gp.stats(fast).dispatch
    assert d.state == "direct"
    with torch.no_grad():
        out = fast(x)
    assert not out.requires_grad and torch.allclose(out, model(x))
    assert d.fallbacks[dispatch.GLOBAL_STATE] == 1
    calls = d.direct_calls
    assert fast(x).requires_grad and d.direct_calls == calls + 1


def test_a_kept_global_state_guard_recompiles_for_no_grad():
    torch.manual_seed(0)
    model = Doubler()
    fast = direct(model)
    x = torch.randn(3, 4)
    warm(fast, x)
    with torch.no_grad():
        out = fast(x)
    d = gp.stats(fast).dispatch
    assert not out.requires_grad and d.fallbacks[dispatch.KEPT_GUARD_FAILED] == 1
    assert gp.stats(fast).compiles == 2


def test_force_eager_stance_is_honoured():
    fast = direct(fresh(scaled))
    x = torch.randn(3)
    warm(fast, x)
    d = gp.stats(fast).dispatch
    with torch.compiler.set_stance("force_eager"):
        assert torch.equal(fast(x), scaled(x))
    assert d.fallbacks[dispatch.STANCE] == 1


def test_a_stance_line_does_not_serve_a_failing_kept_guard_unchecked():
    policy = gp.load("""guardpolicy 1
unsafe policy tensors_stance {
  use keep_tensor_guards
  default drop
  stance skip_guard_eval_unsafe after 3 calls
}
""")
    fast = gp.compile(fresh(scaled), policy, backend="eager", dispatch="direct", dynamic=False)
    small, big = torch.randn(4), torch.randn(7)
    warm(fast, small)
    st = gp.stats(fast)
    assert st.dispatch.warmup == 3 and st.dispatch.state == "direct" and st.stance_active
    assert torch.equal(fast(big), scaled(big))
    assert st.compiles == 2 and st.dispatch.fallbacks[dispatch.KEPT_GUARD_FAILED] == 1
