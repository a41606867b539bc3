"""Direct dispatch (``gp.compile(..., dispatch="direct")``) and the call itself, with real
torch.compile runs: the frame's locals bound as the frame holds them (defaults, ``*rest``,
closure cells read at each call), a copy and an unpickled module, a torch module's inline
wrapper, nothing of a call kept alive, threads calling at once; and turning it on (the
``dispatch=`` argument, the policy line ``dispatch direct``, a policy with config lines), with
a clear error for an unknown mode or where torch lacks what it needs."""

import copy
import gc
import pickle
import threading
import weakref

import pytest
import torch

import guardpolicy as gp
from dispatch_harness import NN, WARMUP, Doubler, direct, fresh, scaled, warm
from guardpolicy.runtime import torch_internals
from guardpolicy.runtime.call import dispatch, frame_locals


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
