"""The third decision, ``watch``, from Python: a plain ``guard_filter_fn`` (and this
release's runtime) keeps a watched guard, ``explain``/``decide`` say ``watch``, the logs and
the trace say it too, and on real compiles torch keeps checking what the policy watches: a
change to that state recompiles and the output equals eager's. Guard names are the ones
torch produced for the models (read back from ``gp.explain``), never written here."""

from __future__ import annotations

import logging
import pickle

import pytest
import torch
import torch._dynamo.testing
from conftest import capture_entries

import guardpolicy as gp
from guardpolicy.runtime import torch_internals

#: The shape a policy that watches is meant to have (docs/language.md): inputs and ambient
#: state kept, what the modules hold watched, nothing dropped (so no `unsafe`).
WATCH_MODULES = """guardpolicy 1

policy watch_modules {
  keep when guard_source == LOCAL
  keep when source.kind in {"GlobalStateSource", "ShapeEnvSource"}
  watch when guard_source.is_unspecialized_nn_module
}
"""

#: All three decisions, for the row-level API.
THREE = """guardpolicy 1

unsafe policy three {
  keep when guard_type == TENSOR_MATCH
  drop when is_global
  default watch
}
"""

ROWS = [
    {"guard_type": "TENSOR_MATCH", "guard_source": "LOCAL"},
    {"guard_type": "CONSTANT_MATCH", "guard_source": "GLOBAL", "is_global": True},
    {"guard_type": "TYPE_MATCH", "guard_source": "LOCAL_UNSPECIALIZED_NN_MODULE"},
]


def test_decide_gives_three_decisions_and_evaluate_stays_bool():
    policy = gp.load(THREE)
    assert policy.decide(ROWS) == ["keep", "drop", "watch"]
    assert policy.evaluate(ROWS) == [True, False, True]
    assert all(type(k) is bool for k in policy.evaluate(ROWS))
    assert policy.default_decision == "watch"
    assert [r.decision for r in policy.rules] == ["keep", "drop"]
    assert "default watch" in repr(policy)


def test_explain_says_watch_and_keep_for_a_watched_entry():
    explained = gp.load(THREE).explain(ROWS)
    assert [e.decision for e in explained] == ["keep", "drop", "watch"]
    assert [e.keep for e in explained] == [True, False, True]
    assert [e.watched for e in explained] == [False, False, True]
    assert explained[2].rule is None  # the default watched it


def test_watch_survives_save_and_pickle(tmp_path):
    policy = gp.load(THREE)
    policy.save(tmp_path / "three.gpolc")
    assert gp.load(tmp_path / "three.gpolc").decide(ROWS) == ["keep", "drop", "watch"]
    assert pickle.loads(pickle.dumps(policy)).decide(ROWS) == ["keep", "drop", "watch"]
    assert "watch (default)" in policy.disassemble()


def test_watching_needs_no_unsafe_and_lint_names_what_cannot_be_watched():
    assert not gp.load(WATCH_MODULES).is_unsafe
    assert [d.code for d in gp.lint(WATCH_MODULES)] == []
    codes = [d.code for d in gp.lint("guardpolicy 1\npolicy p {\n  default watch\n}\n")]
    assert codes == ["GP3012", "GP3012"]  # the inputs' guards, the ambient guards


def test_a_plain_guard_filter_fn_keeps_every_watched_guard(mlp_model):
    entries = capture_entries(mlp_model.fn, *mlp_model.args)
    policy = gp.load(WATCH_MODULES)
    decisions = [e.decision for e in policy.explain(entries)]
    assert "watch" in decisions and "drop" not in decisions
    assert policy(entries) == [True] * len(entries)


def _assert_same_as_eager(opt, model, x):
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x))


def test_compiled_model_watches_module_state_and_torch_still_checks_it(mlp_model):
    model, (x,) = mlp_model.fn, mlp_model.args
    opt = gp.compile(model, gp.load(WATCH_MODULES), backend="eager")
    _assert_same_as_eager(opt, model, x)
    frame = gp.explain(opt)[0]
    watched = [e for e in frame if e.decision == "watch"]
    assert watched and all(e.keep and e.watched and e.rule.decision == "watch" for e in watched)
    # The guards of the float attribute `scale` are among them (names as torch wrote them).
    assert any("scale" in e.name for e in watched), [e.name for e in watched]
    assert {e.decision for e in frame if not e.name} == {"keep"}  # the ambient guards
    assert gp.stats(opt).compiles == 1

    model.scale = 2.0  # the state a watched guard reads: torch checked it, so it recompiles
    _assert_same_as_eager(opt, model, x)
    assert gp.stats(opt).compiles == 2
    model.scale = 0.5  # back: the first entry serves again
    _assert_same_as_eager(opt, model, x)
    assert gp.stats(opt).compiles == 2


def test_plain_torch_compile_recompiles_on_a_change_to_watched_state(mlp_model):
    model, (x,) = mlp_model.fn, mlp_model.args
    counter = torch._dynamo.testing.CompileCounter()
    opt = torch.compile(model, backend=counter, options={"guard_filter_fn": gp.load(WATCH_MODULES)})
    _assert_same_as_eager(opt, model, x)
    assert counter.frame_count == 1
    model.scale = 3.0
    _assert_same_as_eager(opt, model, x)
    assert counter.frame_count == 2


def test_default_watch_keeps_inputs_and_global_state_checked(mlp_model):
    model, (x,) = mlp_model.fn, mlp_model.args
    opt = gp.compile(model, gp.load("guardpolicy 1\npolicy all {\n  default watch\n}\n"), backend="eager")
    _assert_same_as_eager(opt, model, x)
    frame = gp.explain(opt)[0]
    assert {e.decision for e in frame} == {"watch"} and all(e.keep for e in frame)
    _assert_same_as_eager(opt, model, x[:2])  # a new shape: TENSOR_MATCH/SHAPE_ENV were kept
    assert gp.stats(opt).compiles == 2
    torch.testing.assert_close(opt(x), model(x))  # grad mode on: GLOBAL_STATE was kept
    assert gp.stats(opt).compiles == 3


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_logs_and_trace_say_watch(mlp_model, monkeypatch):
    model, (x,) = mlp_model.fn, mlp_model.args
    artifacts = []
    monkeypatch.setattr(torch_internals, "trace_artifact", lambda name, payload: artifacts.append((name, payload())))
    logger = logging.getLogger("guardpolicy")
    handler = _Lines()
    logger.addHandler(handler)
    opt = gp.compile(model, gp.load(WATCH_MODULES), backend="eager")
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        _assert_same_as_eager(opt, model, x)
    finally:
        logger.setLevel(old_level)
        logger.removeHandler(handler)
    frame = gp.explain(opt)[0]
    count = {d: sum(e.decision == d for e in frame) for d in ("keep", "watch", "drop")}
    (summary,) = [ln for ln in handler.lines if ln.startswith("policy `watch_modules`")]
    assert summary.endswith(f": {len(frame)} guards, {count['keep']} kept, {count['watch']} watched, 0 dropped")
    decided = [ln.split()[0] for ln in handler.lines if ln.startswith("  ")]
    assert decided == [e.decision for e in frame]
    ((name, payload),) = artifacts
    assert name == "guardpolicy_decisions"
    assert [g["decision"] for g in payload["guards"]] == [e.decision for e in frame]


@pytest.mark.parametrize("text", ["watch", "default watch", "expect watch"])
def test_the_lexer_knows_the_keyword(text):
    pytest.importorskip("pygments")
    from pygments.token import Keyword

    from guardpolicy.tools.pygments_lexer import GuardPolicyLexer

    tokens = [(t, v) for t, v in GuardPolicyLexer().get_tokens(text) if v.strip()]
    assert (Keyword, "watch") in tokens, tokens
