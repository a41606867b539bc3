"""guardpolicy.compile: the policy as guard_filter_fn, its config knobs, its stance."""

import pytest
import torch

import guardpolicy as gp

SERVING = """guardpolicy 1

unsafe policy serving {
  keep when guard_type in {GLOBAL_STATE, SHAPE_ENV}
  drop when is_global
  default keep
  config install_free_tensors = true
  stance skip_guard_eval_unsafe after 3 calls
}
"""

seen_config: list[tuple[str, bool]] = []
SCALE = 2


def _read_config_at_runtime(tag: str) -> None:
    seen_config.append((tag, torch._dynamo.config.install_free_tensors))


def fn_with_break(x):
    y = x * SCALE
    torch._dynamo.graph_break()
    _read_config_at_runtime("call")  # runs eagerly, between the two graphs
    return y + 1


def recording_backend(gm, example_inputs):
    seen_config.append(("compile", torch._dynamo.config.install_free_tensors))
    return gm.forward


def test_config_knobs_apply_during_compile_and_calls_only():
    seen_config.clear()
    policy = gp.load(SERVING)
    assert policy.config == {"install_free_tensors": True}
    compiled = gp.compile(fn_with_break, policy, backend=recording_backend)
    assert torch._dynamo.config.install_free_tensors is False
    out = compiled(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 3.0))
    assert ("compile", True) in seen_config and ("call", True) in seen_config
    assert all(value for _, value in seen_config)
    assert torch._dynamo.config.install_free_tensors is False  # restored after the call
    assert compiled.compiles >= 1


def test_caller_options_are_not_changed():
    options = {}
    policy = gp.load(SERVING)
    compiled = gp.compile(lambda x: x + 1, policy, backend="eager", options=options)
    assert torch.equal(compiled(torch.zeros(2)), torch.ones(2))
    assert options == {}
    assert compiled._torch_options["guard_filter_fn"] is not None


def test_stance_switches_after_exactly_n_quiet_calls_and_resets():
    global SCALE
    policy = gp.load(SERVING.replace("drop when is_global", "drop when name == \"nothing\""))
    stances = []

    def f(x):
        return x * SCALE

    compiled = gp.compile(f, policy, backend="eager")
    x = torch.ones(2)
    for _ in range(4):
        stances.append(compiled.stance_active)
        compiled(x)
    # Call 1 compiles (not quiet); calls 2, 3, 4 are quiet: active after the 4th call.
    assert stances == [False, False, False, False]
    assert compiled.quiet_calls == 3 and compiled.stance_active
    # Under skip_guard_eval_unsafe the SCALE guard is not evaluated: a stale result.
    SCALE = 5
    try:
        assert torch.equal(compiled(x), torch.full((2,), 2.0))
        compiled.reset_stance()
        assert not compiled.stance_active and compiled.quiet_calls == 0
        assert torch.equal(compiled(x), torch.full((2,), 5.0))  # guards again: recompiled
    finally:
        SCALE = 2


def test_a_recompile_during_warmup_restarts_the_count():
    policy = gp.load(SERVING)
    compiled = gp.compile(lambda x: x.sin(), policy, backend="eager", dynamic=False)
    compiled(torch.ones(2))
    compiled(torch.ones(2))
    assert compiled.quiet_calls == 1
    compiled(torch.ones(5))  # a new shape: recompiles
    assert compiled.quiet_calls == 0 and not compiled.stance_active
    for _ in range(3):
        compiled(torch.ones(5))
    assert compiled.stance_active


def test_modules_keep_their_interface():
    model = torch.nn.Linear(4, 2)
    compiled = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager")
    x = torch.randn(3, 4)
    assert torch.allclose(compiled(x), model(x))
    assert compiled.weight is model.weight  # attributes reach the compiled module
    assert compiled.policy.name == "skip_guard_on_all_nn_modules"


def test_mode_becomes_inductor_options_and_errors_are_clear():
    policy = gp.load_std("skip_all_guards")
    compiled = gp.compile(lambda x: x, policy, mode="max-autotune-no-cudagraphs")
    assert compiled._torch_options["max_autotune"] is True
    assert "guard_filter_fn" in compiled._torch_options
    with pytest.raises(ValueError, match="Either mode or options"):
        gp.compile(lambda x: x, policy, mode="max-autotune", options={"a": 1})
    with pytest.raises(ValueError, match="only applies to the inductor backend"):
        gp.compile(lambda x: x, policy, mode="max-autotune", backend="eager")
    with pytest.raises(gp.PolicyError):
        gp.compile(lambda x: x, "guardpolicy 1\npolicy p { drop when nmae == 1 }\n")


def test_explain_compiled_names_the_deciding_rule_per_guard():
    compiled = gp.compile(fn_with_break, gp.load(SERVING), backend="eager")
    compiled(torch.ones(2))
    frames = gp.explain(compiled)
    assert len(frames) == compiled.compiles >= 2  # the graph break makes a resume frame
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
    assert first == compiled.explanations[0] and first is not compiled.explanations[0]
