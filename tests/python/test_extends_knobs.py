"""A storm fix as one line on top of the safe setting: ``unsafe policy fix extends watch_state
{ drop when ...; config ... }`` under ``gp.compile`` (backend eager: guards and recompiles do
not depend on it). The policy watches as ``watch_state`` does (its rules after the fix's own,
its ``default watch``, ``config`` and ``dispatch`` lines inherited), and the storm knobs are
``config`` lines applied to the compiled object alone: ``allow_unspec_int_on_nn_module`` ends
the storm of a module int changed per call, ``recompile_limit`` is that object's limit while
another compiled object of the same process keeps torch's 8."""

from __future__ import annotations

import torch

import guardpolicy as gp

FIX = """guardpolicy 1

unsafe policy fix extends watch_state {
  drop when name == "opts['run_id']"
%s}
"""
CALLS = 20


class Runner(torch.nn.Module):
    """A runner whose batch size is a module int set before each call, with an options dict
    made anew per call whose run id only a dead branch reads."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.num_tokens = 1

    def forward(self, x, opts):
        if opts["run_id"] == "debug":  # no run is called so
            x = x + 1
        return self.fc(x[: self.num_tokens])


class OtherRunner(torch.nn.Module):
    """The same storm in another code object (torch counts recompile_limit per code object)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.num_tokens = 1

    def forward(self, x):
        return self.fc(x[: self.num_tokens])


def _storm(model: torch.nn.Module, compiled, with_opts: bool = True) -> None:
    """CALLS calls, each with a new `num_tokens` (and a new run id), every output equal to eager's."""
    with torch.no_grad():
        for i in range(CALLS):
            model.num_tokens = i + 1
            x = torch.randn(CALLS + 4, 4)
            args = (x, {"run_id": f"run-{i}"}) if with_opts else (x,)
            torch.testing.assert_close(compiled(*args), model(*args), rtol=0, atol=0)


def _fix(tmp_path, lines: str = "") -> str:
    path = tmp_path / "fix.gpol"
    path.write_text(FIX % lines, encoding="utf-8")
    return str(path)


def test_the_fix_watches_as_watch_state_and_drops_its_one_guard(tmp_path):
    torch.manual_seed(0)
    path = _fix(tmp_path, "  config allow_unspec_int_on_nn_module = true\n")
    policy = gp.load(path)
    assert policy.default_decision == "watch" and policy.dispatch == "direct"
    assert policy.config == {"allow_unspec_int_on_nn_module": True, "install_free_tensors": True}
    model = Runner().eval()
    compiled = gp.compile(model, path, backend="eager")
    _storm(model, compiled)
    [frame, *_] = gp.explain(compiled)
    by_name = {(e.name, e.guard_type): e for e in frame}
    run_id = by_name[("opts['run_id']", "CONSTANT_MATCH")]
    assert not run_id.keep and (run_id.rule.policy, run_id.rule.file, run_id.rule.line) == ("fix", path, 4)
    x = by_name[("x", "TENSOR_MATCH")]  # watch_state's first rule, reported where it is written
    assert x.keep and not x.watched and x.rule.policy == "watch_state"
    assert (x.rule.file.endswith("std/watch_state.gpol"), x.rule.line) == (True, 6)
    weight = by_name[("self._modules['fc']._parameters['weight']", "TENSOR_MATCH")]
    assert weight.watched and weight.rule is None  # watch_state's `default watch`
    assert sum(e.watched for e in frame) >= 10


def test_a_module_int_per_call_compiles_twice_with_the_config_line_and_storms_without(tmp_path):
    torch.manual_seed(0)
    model = Runner().eval()
    fixed = gp.compile(model, _fix(tmp_path, "  config allow_unspec_int_on_nn_module = true\n"), backend="eager")
    _storm(model, fixed)
    assert gp.stats(fixed).compiles <= 2 and gp.stats(fixed).eager_fallbacks == []

    torch._dynamo.reset()
    model = Runner().eval()
    storming = gp.compile(model, _fix(tmp_path), backend="eager")
    _storm(model, storming)
    st = gp.stats(storming)
    assert st.compiles == torch._dynamo.config.recompile_limit == 8
    [fallback] = st.eager_fallbacks
    assert (fallback.limit, fallback.value) == ("recompile_limit", 8)
    assert fallback.most_failed.startswith("self.num_tokens")


def test_recompile_limit_is_the_compiled_objects_alone(tmp_path):
    torch.manual_seed(0)
    model = Runner().eval()
    limited = gp.compile(model, _fix(tmp_path, "  config recompile_limit = 2\n"), backend="eager")
    _storm(model, limited)
    [fallback] = gp.stats(limited).eager_fallbacks
    assert (gp.stats(limited).compiles, fallback.limit, fallback.value) == (2, "recompile_limit", 2)

    assert torch._dynamo.config.recompile_limit == 8
    other = OtherRunner().eval()
    compiled = gp.compile(other, "watch_state", backend="eager")
    _storm(other, compiled, with_opts=False)
    [fallback] = gp.stats(compiled).eager_fallbacks
    assert (gp.stats(compiled).compiles, fallback.value) == (8, 8)
