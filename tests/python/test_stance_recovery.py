"""The stance that recovers (guardpolicy.runtime.call.recovery): after warm-up, ``policies/examples/serving.gpol``
meets what warm-up did not show -- a new batch size, grad mode, ``.double()``, another dtype --
and each call compiles with every guard, equals eager, raises nothing, and the stance is back
on after the quiet calls. ``on_recompile raise`` and ``warn`` do what they say."""

import logging
from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from guardpolicy.tools.common.compare import compare

SERVING = Path(__file__).resolve().parents[2] / "policies" / "examples" / "serving.gpol"
WARMUP = 8  # serving.gpol's `stance skip_guard_eval_unsafe after 8 calls`


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def warm(opt, x, calls: int = WARMUP + 2) -> None:
    for _ in range(calls):
        opt(x)


def serving(model, policy=SERVING):
    opt = gp.compile(model, policy, backend="eager")
    return opt, gp.stats(opt)


def recovered(opt, st, model, x, recoveries: int) -> None:
    """The call on ``x`` recovered (counted), equals eager, and after the warm-up's quiet calls
    the stance is on again and the same input compiles nothing more."""
    out = opt(x)
    assert st.recoveries == recoveries
    assert compare(out, model(x)) is None
    assert not st.stance_active and st.quiet_calls == 0
    compiles = st.compiles
    warm(opt, x, WARMUP)
    assert st.stance_active and st.compiles == compiles
    assert compare(opt(x), model(x)) is None and st.compiles == compiles and st.recoveries == recoveries


def test_serving_recovers_from_a_new_batch_size_grad_mode_double_and_another_dtype():
    model = mlp()
    opt, st = serving(model)
    x = torch.randn(8, 4)
    with torch.no_grad():
        warm(opt, x)
        assert st.stance_active and st.compiles == 1 and st.recoveries == 0
        recovered(opt, st, model, torch.randn(5, 4), 1)  # a ragged last batch
        warm(opt, x)
    with torch.enable_grad():  # a fine-tuning step: the output requires grad
        out = opt(x)
        assert out.requires_grad and st.recoveries == 2
        assert compare(out, model(x)) is None
    with torch.no_grad():
        warm(opt, x)
        model.double()
        recovered(opt, st, model, x.double(), 3)
        warm(opt, x.double())
        model.to(torch.bfloat16)
        recovered(opt, st, model, x.to(torch.bfloat16), 4)
    assert st.compiles == 5  # one new cache entry per change, none while the stance was on


def test_a_recovery_is_logged_once_per_new_cache_entry(caplog):
    model = mlp()
    opt, st = serving(model)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="guardpolicy"):
        warm(opt, torch.randn(8, 4))
        opt(torch.randn(3, 4))
        warm(opt, torch.randn(3, 4))
    logged = [r.getMessage() for r in caplog.records if "after warm-up matched no cache entry" in r.getMessage()]
    assert len(logged) == 1 and st.recoveries == 1
    assert f"call {WARMUP + 3} of 'serving'" in logged[0] and "the stance returns after 8 quiet calls" in logged[0]


def policy_with(action: str) -> gp.Policy:
    text = SERVING.read_text()
    return gp.load(text.replace("  stance skip_guard_eval_unsafe after 8 calls\n",
                                 f"  stance skip_guard_eval_unsafe after 8 calls\n  on_recompile {action}\n"))


def test_on_recompile_raise_gives_torchs_error_after_warmup():
    policy = policy_with("raise")
    assert policy.on_recompile == "raise"
    opt, st = serving(mlp(), policy)
    with torch.no_grad():
        warm(opt, torch.randn(8, 4))
        with pytest.raises(RuntimeError, match="Recompilation triggered with skip_guard_eval_unsafe stance"):
            opt(torch.randn(5, 4))
    assert st.recoveries == 0 and st.compiles == 1


def test_on_recompile_warn_recovers_with_one_warning():
    model = mlp()
    opt, st = serving(model, policy_with("warn"))
    x = torch.randn(5, 4)
    with torch.no_grad():
        warm(opt, torch.randn(8, 4))
        with pytest.warns(gp.StanceRecompileWarning, match="after warm-up matched no cache entry") as seen:
            out = opt(x)
        ours = [w for w in seen if issubclass(w.category, gp.StanceRecompileWarning)]  # torch 2.15 warns too on Python 3.13.0 ("Guards may run slower")
        assert len(ours) == 1 and st.recoveries == 1 and compare(out, model(x)) is None


def test_the_default_is_recompile_and_a_policy_without_stance_has_none():
    assert gp.load(SERVING).on_recompile == "recompile"
    assert gp.load_std("skip_guard_on_all_nn_modules").on_recompile is None


def test_on_recompile_needs_a_stance_and_a_known_action():
    with pytest.raises(gp.PolicyError, match="`on_recompile` without a `stance` line"):
        gp.load("guardpolicy 1\npolicy p {\n  default keep\n  on_recompile warn\n}\n")
    with pytest.raises(gp.PolicyError, match="unknown on_recompile action `rebuild`"):
        policy_with("rebuild")


def test_a_function_recovers_too():
    opt = gp.compile(lambda x: x.sin() + 1, SERVING, backend="eager")
    st = gp.stats(opt)
    warm(opt, torch.ones(4))
    x = torch.ones(2, 3)
    assert torch.equal(opt(x), x.sin() + 1) and st.recoveries == 1


G = torch.ones(2)


def broken(x):
    y = x * 2
    torch._dynamo.graph_break()
    return y + G  # the resume frame's guards see G; the first frame's do not


def test_a_miss_after_a_graph_break_is_not_run_twice_and_raises_torchs_error_once():
    """The first frame ran (its side effects happened): running the call again would repeat
    them, so the miss in the resume frame raises torch's error, as documented; the object
    leaves the stance, so the next call compiles and equals eager."""
    global G
    opt = gp.compile(broken, SERVING, backend="eager")
    st = gp.stats(opt)
    x = torch.ones(2)
    try:
        warm(opt, x)
        assert st.stance_active and st.compiles == 2  # the frame and its resume frame
        G = torch.ones(2, dtype=torch.float64)
        with pytest.raises(RuntimeError, match="Recompilation triggered with skip_guard_eval_unsafe stance"):
            opt(x)
        assert st.recoveries == 0 and not st.stance_active  # left the stance: the next call compiles
        assert compare(opt(x), broken(x)) is None and st.compiles == 3
        warm(opt, x)
        assert st.stance_active and compare(opt(x), broken(x)) is None and st.compiles == 3
    finally:
        G = torch.ones(2)


def test_on_recompile_survives_an_artifact_and_lints_clean(tmp_path):
    policy = policy_with("warn")
    policy.save(tmp_path / "serving.gpolc")
    again = gp.load(tmp_path / "serving.gpolc")
    assert (again.on_recompile, again.stance, again.verify) == ("warn", ("skip_guard_eval_unsafe", 8), (100, "recompile"))
    source = tmp_path / "warn.gpol"
    source.write_text(SERVING.read_text().replace("  verify every 100 calls\n", "  on_recompile warn\n  verify every 100 calls\n"))
    assert gp.lint(source) == []
