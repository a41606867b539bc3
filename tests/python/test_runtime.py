"""guardpolicy.compile: the policy as guard_filter_fn, its config knobs (in this object's
compiles only), its stance (for this object's calls only), and a drop-in result."""

import copy
import pickle
import threading

import pytest
import torch

import guardpolicy as gp
from guardpolicy.runtime import compiled as runtime

SERVING = """guardpolicy 1

unsafe policy serving {
  keep when guard_type in {GLOBAL_STATE, SHAPE_ENV}
  drop when is_global
  default keep
  config install_free_tensors = true
  stance skip_guard_eval_unsafe after 3 calls
}
"""

IFT_ONLY = """guardpolicy 1

unsafe policy ift {
  use skip_guard_on_all_nn_modules
  default keep
  config install_free_tensors = true
}
"""

KEEP_ALL_IFT = """guardpolicy 1

unsafe policy keep_all_ift {
  default keep
  config install_free_tensors = true
}
"""

KEEP_ALL_STANCE = SERVING.replace("drop when is_global", 'drop when name == "nothing"')

SCALE = 2
OTHER_SCALE = 3


class Recorder:
    """A backend recording, per compiled graph, the ``install_free_tensors`` knob in force
    and the number of graph inputs (free tensors installed: parameters are not inputs)."""

    def __init__(self):
        self.compiles: list[tuple[bool, int]] = []

    def __call__(self, gm, example_inputs):
        self.compiles.append((torch._dynamo.config.install_free_tensors, len(example_inputs)))
        return gm.forward


def test_knobs_hold_in_a_recompile_after_50_quiet_calls_and_not_in_another_compile():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    rec, other_rec = Recorder(), Recorder()
    compiled = gp.compile(model, IFT_ONLY, backend=rec, dynamic=False)
    compiled(torch.randn(2, 4))
    assert rec.compiles == [(True, 1)]  # only x: weight and bias are installed free tensors
    other = torch.compile(lambda x: x * OTHER_SCALE + 1, backend=other_rec)
    other(torch.ones(3))  # compiled between two calls of ours: torch's own config
    assert other_rec.compiles == [(False, 1)]
    for _ in range(50):
        compiled(torch.randn(2, 4))
    assert len(rec.compiles) == 1 and torch._dynamo.config.install_free_tensors is False
    out = compiled(torch.randn(7, 4))  # a new shape, long after warm-up: a recompile
    assert rec.compiles == [(True, 1), (True, 1)]
    assert out.shape == (7, 4)
    assert torch._dynamo.config.install_free_tensors is False
    # The same model compiled the torch way, without the knob, has its parameters as inputs.
    plain = Recorder()
    torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 4)), backend=plain, dynamic=False)(torch.randn(2, 4))
    assert plain.compiles == [(False, 3)]


def test_calls_that_compile_nothing_never_enter_the_config_patch(monkeypatch):
    entered = []
    real = runtime.ScopedConfigCallback.__call__
    monkeypatch.setattr(runtime.ScopedConfigCallback, "__call__",
                        lambda self, *a, **k: entered.append(1) or real(self, *a, **k))
    compiled = gp.compile(torch.nn.Linear(4, 4), IFT_ONLY, backend="eager")
    x = torch.randn(2, 4)
    compiled(x)
    after_first = len(entered)
    assert after_first >= 1
    for _ in range(100):
        compiled(x)
    assert len(entered) == after_first


def test_another_thread_compiling_during_our_compile_sees_torchs_config():
    seen = []

    def other_backend(gm, example_inputs):
        seen.append(torch._dynamo.config.install_free_tensors)
        return gm.forward

    other = torch.compile(lambda x: x - 1, backend=other_backend)
    worker = []

    def our_backend(gm, example_inputs):
        # Inside our compile (knob patched): another thread compiles meanwhile.
        t = threading.Thread(target=other, args=(torch.ones(2),))
        t.start()
        t.join(timeout=0.5)  # it waits for Dynamo's compile lock, which our compile holds
        worker.append(t)
        return gm.forward

    compiled = gp.compile(torch.nn.Linear(2, 2), IFT_ONLY, backend=our_backend)
    compiled(torch.ones(1, 2))
    worker[0].join(timeout=60)
    assert not worker[0].is_alive()
    assert seen == [False]


def test_stance_holds_for_this_object_and_not_for_another_compiled_function():
    global SCALE, OTHER_SCALE

    def f(x):
        return x * SCALE

    def g(x):
        return x * OTHER_SCALE

    compiled = gp.compile(f, KEEP_ALL_STANCE, backend="eager")
    other = torch.compile(g, backend="eager")
    x = torch.ones(2)
    for _ in range(5):
        compiled(x)
    st = gp.stats(compiled)
    assert st.stance_active and st.calls == 5 and st.quiet_calls == 4
    assert torch.equal(other(x), torch.full((2,), 3.0))
    SCALE, OTHER_SCALE = 5, 7
    try:
        # Ours skips guard evaluation: the SCALE guard is not checked, a stale result.
        assert torch.equal(compiled(x), torch.full((2,), 2.0))
        # The other function, called in between, still evaluates its guards: recompiles.
        assert torch.equal(other(x), torch.full((2,), 7.0))
        # A function compiled for the first time after our warm-up compiles as usual
        # (a global stance would make this a hard failure).
        sampler = torch.compile(lambda t: t.softmax(0), backend="eager")
        assert torch.allclose(sampler(x), torch.full((2,), 0.5))
        assert torch._dynamo.eval_frame._stance.skip_guard_eval_unsafe is False
        st.reset_stance()
        assert not st.stance_active and st.quiet_calls == 0
        assert torch.equal(compiled(x), torch.full((2,), 5.0))  # guards again: recompiled
    finally:
        SCALE, OTHER_SCALE = 2, 3


def test_stance_switches_after_exactly_n_quiet_calls():
    compiled = gp.compile(lambda x: x + 1, KEEP_ALL_STANCE, backend="eager")
    st = gp.stats(compiled)
    x = torch.ones(2)
    active = []
    for _ in range(6):
        compiled(x)
        active.append(st.stance_active)
    # Call 1 compiles; calls 2, 3, 4 are the 3 quiet calls; calls 5 and 6 run under the stance.
    assert active == [False, False, False, True, True, True]


def test_a_recompile_during_warmup_restarts_the_count():
    compiled = gp.compile(lambda x: x.sin(), SERVING, backend="eager", dynamic=False)
    st = gp.stats(compiled)
    compiled(torch.ones(2))
    compiled(torch.ones(2))
    assert st.quiet_calls == 1
    compiled(torch.ones(5))  # a new shape: recompiles
    assert st.quiet_calls == 0 and not st.stance_active and st.compiles == 2
    for _ in range(4):
        compiled(torch.ones(5))
    assert st.stance_active


def test_a_policy_without_stance_adds_no_per_call_hook():
    compiled = gp.compile(torch.nn.Linear(2, 2), IFT_ONLY, backend="eager")
    plain = torch.compile(torch.nn.Linear(2, 2), backend="eager")
    assert len(compiled.dynamo_ctx.enter_exit_hooks) == len(plain.dynamo_ctx.enter_exit_hooks)
    compiled(torch.ones(1, 2))
    assert gp.stats(compiled).calls is None and gp.stats(compiled).compiles == 1


class WithOwnState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.policy = "the model's own"
        self.calls = 41

    def forward(self, x):
        return self.fc(x).relu()


def test_result_is_an_optimized_module_and_keeps_the_model_attributes():
    model = WithOwnState()
    compiled = gp.compile(model, SERVING, backend="eager")
    assert isinstance(compiled, torch.nn.Module)
    assert isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule)
    x = torch.randn(3, 4)
    assert torch.allclose(compiled(x), model(x))
    assert compiled.policy == "the model's own" and compiled.calls == 41
    compiled.calls = 42  # writes through to the model, as torch's OptimizedModule does
    assert model.calls == 42 and model.policy == "the model's own"
    assert gp.stats(compiled).policy.name == "serving"
    assert "fc" in dir(compiled) and "fc.weight" in dict(compiled.named_parameters()).keys() | {
        k.removeprefix("_orig_mod.") for k in compiled.state_dict()}
    assert compiled.fc.weight is model.fc.weight


def test_eval_train_to_return_the_guardpolicy_module_and_keep_config_and_explain():
    rec = Recorder()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    compiled = gp.compile(model, KEEP_ALL_IFT, backend=rec)
    x = torch.randn(2, 4)
    compiled(x)
    frames = len(gp.explain(compiled))
    for same in (compiled.eval(), compiled.train(), compiled.to(torch.float32), compiled.requires_grad_(True)):
        assert same is compiled
    compiled.eval()
    assert not model.training
    out = compiled(x)  # training flipped: the kept guard on it recompiles, under the config
    assert torch.equal(out, model(x))
    assert rec.compiles[-1] == (True, 1) and len(rec.compiles) == 2
    assert len(gp.explain(compiled)) > frames


def _decisions(compiled, x):
    compiled(x)
    return [[(e.decision, e.name, e.guard_type) for e in frame] for frame in gp.explain(compiled)]


def test_deepcopy_and_pickle_of_a_compiled_module_keep_policy_and_decisions():
    model = WithOwnState()
    x = torch.randn(2, 4)
    compiled = gp.compile(model, SERVING, backend="eager")
    expected = _decisions(compiled, x)
    for make in (copy.deepcopy, lambda c: pickle.loads(pickle.dumps(c))):
        torch._dynamo.reset()
        twin = make(compiled)
        assert type(twin) is type(compiled) and twin._orig_mod is not model
        st = gp.stats(twin)
        assert st is not gp.stats(compiled) and st.policy.name == "serving"
        st.explanations.clear()
        assert torch.allclose(twin(x), model(x))
        assert [[(e.decision, e.name, e.guard_type) for e in frame] for frame in st.explanations] == expected
        assert twin.calls == 41  # the model's own attribute, copied with it


def test_a_policy_pickles_and_deep_copies_as_its_source_rechecked():
    policy = gp.load_std("keep_tensor_guards", keep_parameters=True)
    entries = [{"guard_type": "TENSOR_MATCH", "value.is_parameter": True, "name": "w"},
               {"guard_type": "ID_MATCH", "name": "self"}]
    for twin in (pickle.loads(pickle.dumps(policy)), copy.deepcopy(policy)):
        assert twin.name == policy.name and twin.params == {"keep_parameters": True}
        assert twin.evaluate(entries) == policy.evaluate(entries) == [True, False]
        assert twin.rules == policy.rules
    text_policy = gp.load(SERVING)
    assert pickle.loads(pickle.dumps(text_policy)).config == {"install_free_tensors": True}
    # torch.compile with the policy as guard_filter_fn deep-copies and pickles, as with
    # torch's own filter functions.
    opt = torch.compile(torch.nn.Linear(2, 2), backend="eager", options={"guard_filter_fn": policy})
    x = torch.ones(1, 2)
    assert torch.allclose(pickle.loads(pickle.dumps(opt))(x), opt(x))
    assert torch.allclose(copy.deepcopy(opt)(x), opt(x))


def test_a_pickled_policy_is_checked_again_when_loaded(tmp_path):
    path = tmp_path / "p.gpol"
    path.write_text(SERVING)
    data = pickle.dumps(gp.load(path))
    path.write_text("not a policy")  # the pickle holds the source as it was loaded
    assert pickle.loads(data).name == "serving"
    broken = data.replace(b"skip_guard_eval_unsafe after 3", b"skip_guard_eval_unsafe after x")
    with pytest.raises(gp.PolicyError, match="p.gpol"):
        pickle.loads(broken)


def test_an_artifact_policy_pickles(tmp_path):
    artifact = tmp_path / "serving.gpolc"
    gp.load(SERVING).save(artifact)
    twin = pickle.loads(pickle.dumps(gp.load(artifact)))
    assert twin.name == "serving" and twin.stance == ("skip_guard_eval_unsafe", 3)


def test_a_guard_filter_fn_in_options_is_refused():
    with pytest.raises(ValueError, match="already hold a guard_filter_fn"):
        gp.compile(lambda x: x, SERVING, options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})


def test_caller_options_are_not_changed():
    options = {"max_autotune": False}
    compiled = gp.compile(torch.nn.Linear(2, 2), SERVING, options=options)
    assert options == {"max_autotune": False}
    assert compiled.get_compiler_config()["max_autotune"] is False


def test_mode_becomes_inductor_options_and_errors_are_clear():
    policy = gp.load_std("skip_all_guards")
    compiled = gp.compile(torch.nn.Linear(2, 2), policy, mode="max-autotune-no-cudagraphs")
    assert compiled.get_compiler_config()["max_autotune"] is True
    with pytest.raises(ValueError, match="Either mode or options"):
        gp.compile(lambda x: x, policy, mode="max-autotune", options={"a": 1})
    with pytest.raises(ValueError, match="only applies to the inductor backend"):
        gp.compile(lambda x: x, policy, mode="max-autotune", backend="eager")
    with pytest.raises(gp.PolicyError):
        gp.compile(lambda x: x, "guardpolicy 1\npolicy p { drop when nmae == 1 }\n")
    with pytest.raises(TypeError, match="guardpolicy.compile returned"):
        gp.stats(torch.compile(lambda x: x))


def fn_with_break(x):
    y = x * SCALE
    torch._dynamo.graph_break()
    return y + 1


def test_explain_compiled_names_the_deciding_rule_per_guard():
    compiled = gp.compile(fn_with_break, gp.load(SERVING), backend="eager")
    compiled(torch.ones(2))
    frames = gp.explain(compiled)
    assert len(frames) == gp.stats(compiled).compiles >= 2  # the graph break makes a resume frame
    guards = [e for frame in frames for e in frame]
    by_type = {e.guard_type: e for e in guards}
    assert by_type["SHAPE_ENV"].keep and by_type["SHAPE_ENV"].rule.line == 4
    globals_ = [e for e in guards if e.name.startswith("G[")]
    assert globals_ and all(not e.keep and e.rule.line == 5 for e in globals_)
    assert any(e.keep and e.rule is None for e in guards)  # the default
    with pytest.raises(TypeError):
        gp.explain(lambda x: x)


def test_explain_says_which_frame_each_list_belongs_to():
    """Issue 17 item 17: each frame's explanations name the compiled function and file:line."""
    compiled = gp.compile(fn_with_break, gp.load(SERVING), backend="eager")
    compiled(torch.ones(2))
    first, resume = gp.explain(compiled)[:2]
    code = fn_with_break.__code__
    assert (first.frame.function, first.frame.file, first.frame.line) == ("fn_with_break", code.co_filename,
                                                                           code.co_firstlineno)
    assert first.frame.compile_id == "0/0"
    assert str(first.frame) == f"fn_with_break at {code.co_filename}:{code.co_firstlineno} [0/0]"
    # The frame Dynamo resumes in after the graph break is a function of its own.
    assert resume.frame.function.startswith("torch_dynamo_resume_in_fn_with_break")
    assert resume.frame.file == code.co_filename and resume.frame.line > code.co_firstlineno
    assert resume.frame.compile_id == "1/0"
    # Still a list of Explanation per guard, as before.
    assert isinstance(first, list) and first and all(isinstance(e, gp.Explanation) for e in first)
    assert first == gp.stats(compiled).explanations[0] and first is not gp.stats(compiled).explanations[0]
