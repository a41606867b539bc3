"""Nothing leaks, and one Policy serves many threads compiling at once."""

import gc
import threading
import weakref

import torch

import guardpolicy as gp


class Small(torch.nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.scale = scale

    def forward(self, x):
        return self.norm(self.lin(x)) * self.scale


def test_compiled_model_is_collected_after_del_and_reset():
    policy = gp.load_std("skip_guard_on_inbuilt_nn_modules")
    model = Small(2.0)
    ref = weakref.ref(model)
    compiled = torch.compile(model, backend="eager", options={"guard_filter_fn": policy})
    compiled(torch.randn(2, 4))
    del model, compiled
    torch._dynamo.reset()
    gc.collect()
    assert ref() is None, "the policy or guardpolicy kept the model alive"


def test_policy_compiled_wrapper_is_collected_too():
    policy = gp.load_std("skip_all_guards")
    model = Small(3.0)
    ref = weakref.ref(model)
    compiled = gp.compile(model, policy, backend="eager")
    compiled(torch.randn(2, 4))
    assert gp.explain(compiled)  # explanations hold strings only
    del model, compiled
    torch._dynamo.reset()
    gc.collect()
    assert ref() is None


def _make_fn(k: int):
    """A function with its own code object (a closure would share one code object, and a
    policy that drops closure guards would then rightly reuse fn_0's graph for fn_1)."""
    namespace = {"torch": torch}
    exec(f"def fn_{k}(x):\n    return torch.sin(x) * {k} + x.sum()\n", namespace)
    return namespace[f"fn_{k}"]


def _decisions_by_function(policy, functions, threads: int):
    out: dict[str, list[list[bool]]] = {f.__name__: [] for f in functions}
    lock = threading.Lock()
    errors = []

    def run(fn):
        def recording(entries):
            decisions = policy(entries)
            with lock:
                out[fn.__name__].append(list(decisions))
            return decisions

        try:
            compiled = torch.compile(fn, backend="eager", options={"guard_filter_fn": recording})
            assert torch.allclose(compiled(torch.ones(3)), fn(torch.ones(3)))
        except Exception as e:  # surfaced below
            errors.append(e)

    if threads == 1:
        for f in functions:
            run(f)
    else:
        ts = [threading.Thread(target=run, args=(f,)) for f in functions]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors
    return out


def test_one_policy_eight_threads_compiling_different_functions():
    policy = gp.load_std("keep_portable_guards")
    functions = [_make_fn(k) for k in range(8)]
    torch._dynamo.reset()
    single = _decisions_by_function(policy, functions, threads=1)
    torch._dynamo.reset()
    threaded = _decisions_by_function(policy, functions, threads=8)
    assert threaded == single
    assert all(len(v) == 1 and any(v[0]) and not all(v[0]) for v in single.values())
