"""A frame that reaches torch's recompile limit falls back to eager, and guardpolicy says so:
one WARNING on the ``guardpolicy`` logger and an ``EagerFallback`` in
``gp.stats(compiled).eager_fallbacks``, with the limit and the last recompile reason torch
gave (its own word is a log line on ``torch._dynamo.convert_frame``, silenced with the rest
of Dynamo's log). Nothing is added to a call: torch calls the compiled object's callback
for that frame once, when it refuses the compile."""

from __future__ import annotations

import logging

import pytest
import torch

import guardpolicy as gp

NN = "skip_guard_on_all_nn_modules"
FALLS_BACK = "falls back to eager"


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x, n: int):
        return self.fc(x) * n


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def torch_warnings():
    """The WARNING lines of Dynamo's ``convert_frame`` logger (which does not reach pytest's
    root handler)."""
    handler, logger = Records(), logging.getLogger("torch._dynamo.convert_frame")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def ours(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "guardpolicy" and FALLS_BACK in r.getMessage()]


@pytest.mark.parametrize("varies", ["int", "shape"])
def test_the_recompile_limit_is_recorded_and_logged_once_and_outputs_stay_eager(varies, caplog, torch_warnings):
    torch.manual_seed(0)
    model = Scaled().eval()
    opt = gp.compile(model, gp.load_std(NN), backend="eager", dynamic=False)
    if varies == "int":
        calls = [(torch.randn(2, 4), n) for n in range(12)]
    else:
        calls = [(torch.randn(rows, 4), 1) for rows in range(1, 13)]
    limit = torch._dynamo.config.recompile_limit
    assert limit == 8
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="guardpolicy"):
        for i, (x, n) in enumerate(calls):
            assert torch.equal(opt(x, n), model(x, n))
            if i == limit - 1:
                assert gp.stats(opt).eager_fallbacks == [] and ours(caplog) == []
    st = gp.stats(opt)
    assert st.compiles == limit
    [fallback] = st.eager_fallbacks
    assert (fallback.frame.function, fallback.frame.file) == ("forward", __file__)
    assert fallback.frame.compile_id == f"0/{limit}"
    assert (fallback.limit, fallback.value) == ("recompile_limit", limit)
    guard = "n == 7" if varies == "int" else "tensor 'x' size mismatch at index 0. expected 8, actual 9"
    assert fallback.last_reason.startswith(f"0/{limit - 1}: {guard}"), fallback.last_reason
    [line] = ours(caplog)
    assert line.startswith(f"guardpolicy: forward at {__file__}:")
    most = "n (CONSTANT_MATCH)" if varies == "int" else "x (TENSOR_MATCH)"
    assert fallback.most_failed == f"{most} failed 36 times"  # 1 + 2 + ... + 8 cache entries tried
    assert (f"torch._dynamo hit config.recompile_limit ({limit}); most often: {most} failed 36 times; "
            f"last reason: 0/{limit - 1}: {guard}") in line
    # what guardpolicy quotes is torch's own line
    [torch_line] = [t for t in torch_warnings if "hit config" in t]
    assert torch_line.startswith(f"torch._dynamo hit config.recompile_limit ({limit})\n")
    assert str(fallback) == f"{fallback.frame}: torch._dynamo hit config.recompile_limit (8), " \
                            f"last reason: {fallback.last_reason}; most often: {fallback.most_failed}"


def multiplied(x, n):
    return x * n


def test_the_accumulated_limit_is_named_and_the_record_survives_pickling(caplog):
    import pickle

    opt = gp.compile(multiplied, gp.load_std(NN), backend="eager", dynamic=False)
    x = torch.ones(2)
    with torch._dynamo.config.patch(accumulated_recompile_limit=3), \
            caplog.at_level(logging.WARNING, logger="guardpolicy"):
        for n in range(6):
            assert torch.equal(opt(x, n), x * n)
    st = gp.stats(opt)
    [fallback] = st.eager_fallbacks
    assert (fallback.limit, fallback.value, fallback.frame.function) == ("accumulated_recompile_limit", 3, "multiplied")
    assert st.compiles == 3 and len(ours(caplog)) == 1
    assert "torch._dynamo hit config.accumulated_recompile_limit (3)" in ours(caplog)[0]
    assert pickle.loads(pickle.dumps(st)).eager_fallbacks == [fallback]


def test_a_policy_config_patch_and_direct_dispatch_see_the_fallback_too(caplog):
    policy = gp.load("guardpolicy 1\nunsafe policy nn_ift {\n  use skip_guard_on_all_nn_modules\n  default keep\n"
                     "  config install_free_tensors = true\n}\n")
    opt = gp.compile(multiplied, policy, backend="eager", dynamic=False, dispatch="direct")
    x = torch.ones(3)
    with caplog.at_level(logging.WARNING, logger="guardpolicy"):
        for n in list(range(10)) + [0] * 10 + [11]:
            assert torch.equal(opt(x, n), x * n)
    st = gp.stats(opt)
    assert [f.limit for f in st.eager_fallbacks] == ["recompile_limit"] and len(ours(caplog)) == 1
    assert st.dispatch.direct_calls > 0  # the entries compiled before the limit still dispatch
