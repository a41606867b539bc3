"""Direct dispatch (``gp.compile(..., dispatch="direct")``) with ``verify``: the sampled
full-guard check on the direct path catches a change to what a dropped guard checked;
``on_violation recompile`` serves eager's output and direct dispatch resumes, ``raise`` names
the dropped guard."""

import pytest
import torch

import guardpolicy as gp
from dispatch_harness import WARMUP, direct, warm
from guardpolicy.runtime.call import dispatch


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
