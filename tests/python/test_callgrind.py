"""bench/callgrind.py: instructions per call counted under callgrind, the measure the
benchmarks use beside wall-clock time. Two builds of one variant count alike; a variant
that verifies every call counts more."""

import sys
from pathlib import Path

import pytest

#: Instruction counts under valgrind, ~1.5 minutes: `make test` runs it (torch 2.13); the
#: portability legs do not.
pytestmark = pytest.mark.soak

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import callgrind  # noqa: E402


def variants():
    """The ``make`` the child builds (this module, imported there by name)."""
    import guardpolicy as gp
    from guardpolicy.tools import latency

    def make(model, inputs, backend):
        policy = gp.load_std("skip_guard_on_all_nn_modules")
        built = [gp.compile(latency.own_class_copy(model), policy, backend=backend) for _ in range(2)]
        every = gp.compile(latency.own_class_copy(model), policy, backend=backend, verify=1)
        return [latency.Variant("plain", built[0]), latency.Variant("again", built[1]),
                latency.Variant("verify=1", every)]

    return make


def test_instructions_per_call_are_repeatable_and_see_a_verified_call(monkeypatch):
    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", here)
    counts = callgrind.count("test_callgrind", "variants", [], "mlp", "eager", 20)
    assert list(counts) == ["plain", "again", "verify=1"]
    assert counts["plain"] > 100_000  # a forward of the demo MLP is hundreds of thousands
    assert abs(counts["again"] / counts["plain"] - 1) < 0.01
    assert counts["verify=1"] > 1.05 * counts["plain"]
