"""Property: a policy ``suggest`` writes never serves a stale result for values of a numeric
attribute around the boundary the model's code compares it with.

Hypothesis generates small modules whose ``forward`` reads ``self.k`` (an int or a float)
in a comparison with a literal (``if self.k > 2:``) or in a slice (``x[:, : self.k]``),
with the attribute's starting value on either side; ``suggest`` audits it (eager backend);
then, under the suggested policy, ``self.k`` is set to each value around the boundary
(the literal and its neighbours, 0, -1, the width of the slice and one more) and the first
call after each change must return eager's output. Few examples, derandomized: each one is
a real audit and compile.
"""

from __future__ import annotations

import operator

import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

import guardpolicy as gp
from guardpolicy.tools.suggest import command as suggest_tool

OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
WIDTH = 4


def _module(kind: str, op: str, literal, start):
    """A module of a fresh class whose forward is written out, so that the literal is in
    its code as a user's would be."""
    if kind == "compare":
        body = (f"    if self.k {op} {literal!r}:\n"
                "        return x * 2 + 1\n"
                "    return x - 1\n")
    else:
        body = "    return x[:, : self.k].sum(-1)\n"
    namespace: dict = {}
    exec("def forward(self, x):\n" + body, namespace)  # noqa: S102 - the generated model's own code
    cls = type(f"Gen_{kind}", (torch.nn.Module,), {"forward": namespace["forward"]})
    m = cls()
    m.k = start
    return m


def _around(kind: str, literal, start) -> list:
    if kind == "compare":
        step = 1 if isinstance(literal, int) else 0.5
        cands = [literal, literal - step, literal + step, 0, -1, start]
        return [type(start)(c) for c in cands]
    return [0, 1, WIDTH - 1, WIDTH, WIDTH + 1, -1, start - 1, start + 1]


CASES = st.one_of(
    st.tuples(st.just("compare"), st.sampled_from(sorted(OPS)), st.integers(-3, 6), st.integers(-4, 8)),
    st.tuples(st.just("compare"), st.sampled_from(sorted(OPS)),
              st.sampled_from([-1.5, 0.0, 0.25, 1.0, 3.5]), st.sampled_from([-2.0, 0.0, 0.5, 1.0, 4.0])),
    st.tuples(st.just("slice"), st.just(""), st.just(0), st.integers(0, WIDTH + 2)),
)


@settings(max_examples=6, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(CASES)
@example(("compare", "==", -3, 5))  # a literal far from the value: only the code's constants reach it
@example(("compare", ">", 0.0, 1.0))  # temperature > 0: the boundary 0.0
@example(("slice", "", 0, WIDTH + 2))  # n_active past the end: one step down changes nothing
def test_suggested_policy_never_serves_stale_around_the_boundary(case):
    kind, op, literal, start = case
    model = _module(kind, op, literal, start)
    x = torch.arange(2 * WIDTH, dtype=torch.float32).reshape(2, WIDTH)
    s = suggest_tool.suggest(model, (x,), backend="eager", verify=None)
    opt = gp.compile(model, gp.load(s.text), backend="eager")
    with torch.no_grad():
        opt(x)
        for value in _around(kind, literal, start):
            model.k = value
            torch.testing.assert_close(opt(x), model(x), msg=lambda m, value=value: f"k={value!r}: {m}\n{s.text}")
    kept = {(n, t) for n, t in s.dropped}
    assert ("self.k", "CONSTANT_MATCH") not in kept and ("self.k", "EQUALS_MATCH") not in kept
