"""Nothing leaks, and one Policy serves many threads compiling at once."""

import gc
import importlib.util
import threading
import weakref
from pathlib import Path

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


def _make_fn(k: int, directory: Path):
    """A function with its own code object, from its own source file (a closure would share
    one code object, and a policy that drops closure guards would then rightly reuse fn_0's
    graph for fn_1). From a file, not ``exec``: torch 2.11 compiles a function without a
    source file through a wrapper frame all such functions share (``wrap_inline``), whose
    only guard on which function it runs is a CLOSURE_MATCH on ``fn``
    (``test_torch_2_11_compiles_exec_functions_through_one_shared_frame``)."""
    path = directory / f"fn_{k}.py"
    path.write_text(f"import torch\n\n\ndef fn_{k}(x):\n    return torch.sin(x) * {k} + x.sum()\n")
    spec = importlib.util.spec_from_file_location(f"_gp_reliability_fn_{k}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, f"fn_{k}")


def _exec_fn(k: int):
    """``fn_k`` made by ``exec``: no source file."""
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


def test_one_policy_eight_threads_compiling_different_functions(tmp_path):
    policy = gp.load_std("keep_portable_guards")
    functions = [_make_fn(k, tmp_path) for k in range(8)]
    torch._dynamo.reset()
    single = _decisions_by_function(policy, functions, threads=1)
    torch._dynamo.reset()
    threaded = _decisions_by_function(policy, functions, threads=8)
    assert threaded == single
    assert all(len(v) == 1 and any(v[0]) and not all(v[0]) for v in single.values())


def test_torch_2_11_compiles_exec_functions_through_one_shared_frame():
    """Why ``_make_fn`` writes files: torch 2.11 wraps a function with no source file in
    ``wrap_inline``'s shared frame, so under a policy that drops closure guards (torch's
    ``keep_portable_guards``) the second such function runs the first one's graph; 2.13+
    compiles each in its own frame (docs/schema.md, "Between releases")."""
    policy = gp.load_std("keep_portable_guards")
    torch._dynamo.reset()
    x = torch.ones(3)
    first, second = _exec_fn(0), _exec_fn(1)
    torch.compile(first, backend="eager", options={"guard_filter_fn": policy})(x)
    got = torch.compile(second, backend="eager", options={"guard_filter_fn": policy})(x)
    release = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    assert torch.equal(got, first(x) if release < (2, 13) else second(x))
    assert not torch.equal(first(x), second(x))
