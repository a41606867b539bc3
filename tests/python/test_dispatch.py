"""Direct dispatch (``gp.compile(..., dispatch="direct")``) with real torch.compile runs: the
outputs of the normal path, fallbacks and refusals with their reasons, recompiles and resumes,
``torch._dynamo.reset()`` mid-run, and a clear error where torch lacks what it needs."""

import copy
import gc
import pickle
import threading
import types
import weakref

import pytest
import torch

import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.runtime.call import dispatch, frame_locals
from guardpolicy.tools.common.models import build, output_tensor
from guardpolicy.tools.latency import own_class_copy

WARMUP = dispatch.DEFAULT_WARMUP
NN = "skip_guard_on_all_nn_modules"


def fresh(fn):
    """A copy of ``fn`` with its own code object (its own Dynamo cache)."""
    out = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def direct(model, std=NN, backend="eager", **kwargs):
    return gp.compile(model, gp.load_std(std), backend=backend, dispatch="direct", **kwargs)


def warm(fn, *args, calls=WARMUP + 2):
    for _ in range(calls):
        fn(*args)


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


def scaled(x):
    return torch.sin(x) * 3 + 1


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


class Doubler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * 2


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


def test_frame_locals_are_bound_as_the_frame_holds_them():
    k = 1.5

    def f(a, b=2, /, c=3, *rest, d, e=5, **extra):
        return a * k + b + c + len(rest) + d + e + len(extra)

    bind = frame_locals.frame_locals_binder(f)
    assert bind(1, d=4) == {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "rest": (), "extra": {}, "k": 1.5}
    assert bind(1, 7, 8, 9, d=4, z=0) == {"a": 1, "b": 7, "c": 8, "d": 4, "e": 5, "rest": (9,),
                                          "extra": {"z": 0}, "k": 1.5}
    with pytest.raises(TypeError):
        bind(1)  # d is required, as for f
    fast = direct(fresh(f))
    x = torch.randn(3)
    for _ in range(WARMUP + 6):
        assert torch.equal(fast(x, 7, 8, 9, d=4, z=0), f(x, 7, 8, 9, d=4, z=0))
    d = gp.stats(fast).dispatch
    assert d.state == "direct" and d.direct_calls >= 4
    assert torch.equal(fast(x, 7, 8, d=4, z=0), f(x, 7, 8, d=4, z=0))  # len(rest) kept: recompiles
    assert d.fallbacks[dispatch.KEPT_GUARD_FAILED] == 1


def test_the_binder_reads_free_variables_from_the_cells_at_each_call_and_leaves_out_an_empty_one():
    def make():
        def g(x):
            return x * factor + offset

        bind = frame_locals.frame_locals_binder(g)
        before = bind(1)  # neither cell has a value yet: the frame would hold neither
        factor = 2.0
        middle = bind(1)
        offset = 3.0
        return before, middle, bind(1), g

    before, middle, after, g = make()
    assert before == {"x": 1}
    assert middle == {"x": 1, "factor": 2.0}
    assert after == {"x": 1, "factor": 2.0, "offset": 3.0}
    g.__closure__[0].cell_contents = 4.0  # the cells themselves, not values copied at capture
    assert frame_locals.frame_locals_binder(g)(5) == {"x": 5, "factor": 4.0, "offset": 3.0}


def test_a_closure_variable_is_part_of_the_frame_locals():
    scale = [3.0]

    def make():
        factor = scale[0]

        def g(x):
            return x * factor

        return g

    g = make()
    fast = direct(g)
    x = torch.randn(4)
    warm(fast, x)
    d = gp.stats(fast).dispatch
    assert d.state == "direct"
    calls = d.direct_calls
    g.__closure__[0].cell_contents = 5.0  # the kept guard L['factor'] == 3.0 fails
    assert torch.equal(fast(x), x * 5.0)
    assert d.direct_calls == calls and d.fallbacks[dispatch.KEPT_GUARD_FAILED] == 1


def test_a_copy_and_an_unpickled_module_dispatch_directly_too():
    torch.manual_seed(0)
    fast = direct(Doubler().eval())
    x = torch.randn(2, 4)
    with torch.no_grad():
        warm(fast, x)
        for other in (copy.deepcopy(fast), pickle.loads(pickle.dumps(fast))):
            d = gp.stats(other).dispatch
            assert d is not gp.stats(fast).dispatch and d.state == "warm-up"
            warm(other, x, calls=2 * WARMUP + 2)
            assert d.state == "direct" and torch.equal(other(x), fast(x))


def test_unknown_dispatch_mode_and_missing_torch_internals_fail_at_compile(monkeypatch):
    with pytest.raises(ValueError, match="dispatch='fast': the dispatch modes are 'direct'"):
        gp.compile(fresh(scaled), gp.load_std(NN), backend="eager", dispatch="fast")
    monkeypatch.setattr(torch_internals.call_state, "GlobalStateGuard", None)
    with pytest.raises(RuntimeError, match=r"dispatch='direct'\) needs torch._C._dynamo.guards.GlobalStateGuard"):
        gp.compile(fresh(scaled), gp.load_std(NN), backend="eager", dispatch="direct")


def test_without_dispatch_nothing_changes():
    fn = gp.compile(fresh(scaled), gp.load_std(NN), backend="eager")
    assert gp.stats(fn).dispatch is None and gp.stats(fn).calls is None


def test_a_torch_module_dispatches_directly_through_its_inline_wrapper():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    fast = direct(model)
    inputs = [torch.randn(4, 8) for _ in range(WARMUP + 11)]
    with torch.no_grad():
        for x in inputs:
            assert torch.equal(fast(x), model(x))
    d = gp.stats(fast).dispatch
    assert d.state == "direct" and d.direct_calls == 10 and d.refusals == []


def test_nothing_of_a_call_is_kept_and_the_model_is_collected_after_del_and_reset():
    model = Doubler()
    model_ref = weakref.ref(model)
    fast = direct(model)
    x = torch.randn(2, 4)
    warm(fast, x)
    assert gp.stats(fast).dispatch.state == "direct"
    y = torch.randn(2, 4)
    input_ref, output_ref = weakref.ref(y), weakref.ref(fast(y))
    del y
    gc.collect()
    assert input_ref() is None and output_ref() is None
    del model, fast
    torch._dynamo.reset()
    gc.collect()
    assert model_ref() is None, "direct dispatch kept the model alive"


def test_threads_calling_at_once_get_their_own_results():
    fast = direct(fresh(scaled), std="keep_tensor_guards", dynamic=False)
    shapes = [torch.randn(3), torch.randn(5)]
    for x in shapes * (WARMUP + 2):
        fast(x)
    errors = []

    def work(seed):
        gen = torch.Generator().manual_seed(seed)
        for i in range(200):
            x = torch.randn(3 + 2 * (i % 2), generator=gen)
            if not torch.equal(fast(x), scaled(x)):
                errors.append((seed, i))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d = gp.stats(fast).dispatch
    assert errors == [] and d.state == "direct" and d.direct_calls > 400
    assert gp.stats(fast).compiles == 2


def test_a_policy_with_config_lines_dispatches_directly():
    policy = gp.load("""guardpolicy 1
unsafe policy nn_ift {
  use skip_guard_on_all_nn_modules
  default keep
  config install_free_tensors = true
}
""")
    torch.manual_seed(0)
    model = Doubler().eval()
    fast = gp.compile(model, policy, backend="eager", dispatch="direct")
    x = torch.randn(2, 4)
    with torch.no_grad():
        warm(fast, x, calls=WARMUP + 5)
        assert torch.equal(fast(x), model(x))
    d = gp.stats(fast).dispatch
    assert d.state == "direct" and d.direct_calls == 5 and d.refusals == []


def test_the_policy_line_dispatch_direct_turns_it_on():
    policy = gp.load("""guardpolicy 1
unsafe policy nn_direct {
  use skip_guard_on_all_nn_modules
  default keep
  dispatch direct
}
""")
    assert policy.dispatch == "direct"
    fast = gp.compile(fresh(scaled), policy, backend="eager")
    x = torch.randn(3)
    warm(fast, x, calls=WARMUP + 3)
    d = gp.stats(fast).dispatch
    assert d.state == "direct" and d.direct_calls == 2
    assert gp.stats(gp.compile(fresh(scaled), gp.load_std(NN), backend="eager")).dispatch is None


# -- with verify: the sampled full-guard check on the direct path ------------------------------


class Gained(torch.nn.Module):
    """The demo MLP's shape, with a float attribute that the nn-module policy's guards drop."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.gain = 1.0

    def forward(self, x):
        return torch.relu(self.fc(x)) * self.gain


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def verified_direct(on_violation, backend="eager"):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Gained().eval()
    fast = direct(model, backend=backend, verify=1, on_violation=on_violation)
    x = torch.randn(4, 16)
    with torch.no_grad():
        warm(fast, x)  # warm-up, the capturing call, one direct call
    d = gp.stats(fast).dispatch
    assert d.state == "direct" and d.direct_calls == 1 and gp.stats(fast).verified_calls == WARMUP + 2
    return model, fast, x


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_verify_recompile_on_the_direct_path_serves_eager_output_and_direct_resumes(backend, one_thread):
    model, fast, x = verified_direct("recompile", backend)
    st, d = gp.stats(fast), gp.stats(fast).dispatch
    model.gain = 2.0
    with torch.no_grad():
        out, ref = fast(x), model(x)
    assert torch.allclose(out, ref) and not torch.allclose(out, ref / 2)
    assert st.compiles == 2 and st.calls == WARMUP + 3 and st.verified_calls == WARMUP + 3
    [violation] = st.violations
    assert violation.call == WARMUP + 3 and violation.action == "recompile"
    assert [(g.name, g.guard_type) for g in violation.guards] == [("self.gain", "CONSTANT_MATCH")]
    assert d.fallbacks == {dispatch.VERIFY_CAUGHT: 1} and d.direct_calls == 1
    with torch.no_grad():
        warm(fast, x)
        out = fast(x)
    assert torch.allclose(out, model(x))
    assert d.state == "direct" and d.direct_calls == 4 and d.captures == 2
    assert st.compiles == 2 and len(st.violations) == 1 and st.verified_calls == 2 * WARMUP + 6


def test_verify_raise_on_the_direct_path_names_the_dropped_guard(one_thread):
    model, fast, x = verified_direct("raise")
    st = gp.stats(fast)
    model.gain = 2.0
    with torch.no_grad(), pytest.raises(gp.StaleGuardError) as info:
        fast(x)
    assert info.value.violation.guards[0].name == "self.gain"
    assert "`self.gain` (CONSTANT_MATCH)" in str(info.value)
    assert "skip_guard_on_all_nn_modules.gpol:" in str(info.value)
    assert st.compiles == 1 and st.dispatch.direct_calls == 1  # the call did not run
    model.gain = 1.0
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x))
    assert st.dispatch.direct_calls == 2 and st.compiles == 1
