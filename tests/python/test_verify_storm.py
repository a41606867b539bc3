"""verify on a recompile-storm fix (issue 54, part 3): a dropped guard on a value that changes
on every call (a run id in a new options dict per call, read by a dead branch) is not a
violation by itself. On a sampled call where only dropped value guards fail, the call runs
on the cached entry and is compared, outputs and writes, with an eager call from the same
state; only a difference is a violation. Verify's own recompiles never count toward
``recompile_limit``; a dry-run says a failed value guard would have skipped a recompile, not
that it would have served a stale result.

Real ``torch.compile`` runs (backend "eager") of a tiny model; every output is compared with
eager on every call. Without the comparison (main before this), the run-id fix below
recompiles on every sampled call and runs eagerly for good at call 800 of 1,200."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from guardpolicy.runtime import torch_internals

RUN_ID = "drop when name == \"opts['run_id']\""


def storm_fix(drop: str, every: int, direct: bool = True, on_violation: str = "") -> gp.Policy:
    """``watch_state`` with one drop line first and a verify line: the policy text a storm
    fix is (``use watch_state`` carries its rules only, so its lines are copied)."""
    text = Path(gp.std_policy_path("watch_state")).read_text()
    body = text.split("policy watch_state {", 1)[1].split("\n}\n", 1)[0]
    lines = [line for line in body.splitlines() if line.strip() and not line.strip().startswith("doc ")]
    if not direct:
        lines = [line for line in lines if line.strip() != "dispatch direct"]
    action = f"  on_violation {on_violation}\n" if on_violation else ""
    return gp.load("guardpolicy 1\n\nunsafe policy storm_fix {\n  %s\n%s\n  verify every %d calls\n%s}\n"
                   % (drop, "\n".join(lines), every, action))


class Options(torch.nn.Module):
    """A forward that takes a new options dict per call, ComfyUI-style: ``run_id`` is read by
    a branch that is never taken; ``scale`` and ``tag`` are used; ``mark`` writes into the
    dict; ``steps`` counts calls in a buffer (written in place)."""

    def __init__(self, count: bool = False):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.count = count
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.last = None

    def forward(self, x, opts):
        y = self.fc(x)
        if opts["run_id"] == "debug":  # dead: no run is called that
            y = y * 0
        if "tag" in opts:
            y = y * len(opts["tag"])
        if "mark" in opts:
            opts["seen"] = True
        if "remember" in opts:
            self.last = opts["run_id"] + "!"  # the run id, written into the model's state
        if self.count:
            self.steps.add_(1)
        return y * opts.get("scale", 1.0)


def _run(calls: int, policy: gp.Policy, options, count: bool = False):
    """``calls`` calls of a compiled ``Options`` with ``options(i)``, each output, the
    options dict and the ``steps`` buffer it wrote compared with eager's on every call.
    Returns the stats, the model and ``model.last`` after each compiled call."""
    torch.manual_seed(0)
    model = Options(count).eval()
    x = torch.randn(2, 8)
    compiled = gp.compile(model, policy, backend="eager")
    lasts = []
    with torch.no_grad():
        for i in range(calls):
            opts, ref_opts = options(i), options(i)
            out = compiled(x, opts)
            lasts.append(model.last)
            steps = model.steps.clone()
            model.steps -= int(count)  # eager's turn from the same count
            assert torch.equal(out, model(x, ref_opts)), f"call {i + 1}"
            assert opts == ref_opts and torch.equal(model.steps, steps), f"call {i + 1}"
    return gp.stats(compiled), model, lasts


def run_ids(i: int) -> dict:
    return {"run_id": f"run-{i}", "scale": 2.0}


@pytest.mark.parametrize(("every", "calls", "direct"), [(100, 1200, True), (10, 300, False)],
                         ids=["every_100_x_1200_direct", "every_10_x_300_normal_path"])
def test_a_run_id_storm_fix_survives_verify(every, calls, direct, caplog):
    with caplog.at_level(logging.DEBUG, logger="guardpolicy"):
        st, _, _ = _run(calls, storm_fix(RUN_ID, every, direct), run_ids)
    assert st.eager_fallbacks == [] and st.violations == []
    assert st.compiles == 1  # at most one extra compile is allowed; none is made
    assert st.verified_calls == calls // every and st.checked_by_eager == calls // every
    said = [r.getMessage() for r in caplog.records if "no violation" in r.getMessage()]
    assert len(said) == calls // every and all(r.levelno == logging.DEBUG for r in caplog.records
                                              if "no violation" in r.getMessage())
    assert "only dropped value guards failed (`opts['run_id']`)" in said[0]


class Dropped(torch.nn.Module):
    """A float attribute set per step (a dropout ``p``) that the output does not depend on in
    ``eval()``."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.p = 0.1

    def forward(self, x):
        return torch.nn.functional.dropout(self.fc(x), self.p, self.training)


def test_a_float_attribute_set_per_step_and_dropped_survives_verify():
    torch.manual_seed(0)
    model, x = Dropped().eval(), torch.randn(2, 8)
    compiled = gp.compile(model, storm_fix('drop when name == "self.p"', 10), backend="eager")
    with torch.no_grad():
        for step in range(300):
            model.p = 0.1 + step * 1e-3
            assert torch.equal(compiled(x), model(x)), f"call {step + 1}"
    st = gp.stats(compiled)
    assert st.compiles == 1 and st.violations == [] and st.eager_fallbacks == [] and st.checked_by_eager == 30


def test_a_storm_fix_that_also_writes_the_options_dict_writes_it_once():
    """The eager run's write (``opts['seen'] = True``) is undone before the cached code runs:
    each dict ends up as eager leaves it, and the writes compare equal."""
    st, _, _ = _run(40, storm_fix(RUN_ID, 10, direct=False), lambda i: {"run_id": f"run-{i}", "mark": 1})
    assert st.violations == [] and st.checked_by_eager == 4 and st.compiles == 1


def test_a_run_id_the_forward_writes_into_the_model_is_a_violation():
    """``self.last = run_id + "!"``: the cached code writes the old run's value (Dynamo folded
    it into a constant), eager the new one: the writes differ, so the drop is caught."""
    st, model, lasts = _run(20, storm_fix(RUN_ID, 10, direct=False), lambda i: {"run_id": f"run-{i}", "remember": 1})
    assert [v.call for v in st.violations] == [10, 20] and st.checked_by_eager == 0
    assert [(g.name, g.guard_type) for g in st.violations[0].guards] == [("opts['run_id']", "CONSTANT_MATCH")]
    assert lasts[0] == "run-0!" and lasts[8] == "run-0!"  # unsampled calls 2-9: the stale write
    assert lasts[9] == "run-9!" and lasts[19] == "run-19!"  # verified, recompiled: eager's write
    assert st.compiles == 3 and st.eager_fallbacks == []


def test_a_dropped_value_the_output_uses_is_still_a_violation_and_recompiles():
    scale = "drop when name == \"opts['scale']\""
    st, _, _ = _run(6, storm_fix(scale, 1), lambda i: {"run_id": "run", "scale": 2.0 if i < 3 else 3.0})
    [violation] = st.violations
    assert violation.call == 4 and violation.action == "recompile"
    assert [(g.name, g.guard_type) for g in violation.guards] == [("opts['scale']", "CONSTANT_MATCH")]
    assert violation.guards[0].rule.line == 4  # the drop line of storm_fix
    assert st.compiles == 2 and st.checked_by_eager == 0  # every output above equalled eager


def test_a_tensor_written_in_place_makes_it_a_violation_and_the_buffer_is_written_once():
    """The eager run would write the ``steps`` buffer: it stops before the write, the call
    is a violation as without the comparison, and the buffer counts every call once."""
    st, model, lasts = _run(30, storm_fix(RUN_ID, 10, direct=False), run_ids, count=True)
    assert [v.call for v in st.violations] == [10, 20, 30] and st.checked_by_eager == 0
    assert int(model.steps) == 30
    assert st.compiles == 4 and st.eager_fallbacks == []


def test_raise_on_a_harmless_drop_does_not_raise_and_on_a_harmful_one_raises_with_the_dict_untouched():
    st, _, _ = _run(20, storm_fix(RUN_ID, 5, on_violation="raise"), run_ids)
    assert st.violations == [] and st.checked_by_eager == 4
    torch.manual_seed(0)
    model = Options().eval()
    x = torch.randn(2, 8)
    compiled = gp.compile(model, storm_fix("drop when name == \"opts['tag']\"", 1, on_violation="raise"),
                          backend="eager")
    with torch.no_grad():
        compiled(x, {"run_id": "a", "tag": "ab", "mark": 1})
        opts = {"run_id": "a", "tag": "abc", "mark": 1}
        with pytest.raises(gp.StaleGuardError) as info:
            compiled(x, opts)
    assert info.value.violation.guards[0].name == "opts['tag']"
    assert opts == {"run_id": "a", "tag": "abc", "mark": 1}  # both runs' write undone: the call did not run
    assert gp.stats(compiled).compiles == 1


def test_verify_recompiles_do_not_count_toward_recompile_limit():
    """recompile_limit 2: four recompiles verify makes (a tag the output uses, dropped) and
    the frame still compiles; without verify the same loop falls back to eager."""
    tags = ["a", "bb", "ccc", "dddd", "eeeee"]
    tag = "drop when name == \"opts['tag']\""
    with torch._dynamo.config.patch(recompile_limit=2):
        st, _, _ = _run(5, storm_fix(tag, 1), lambda i: {"run_id": "run", "tag": tags[i]})
        assert [v.call for v in st.violations] == [2, 3, 4, 5] and st.compiles == 5
        assert st.eager_fallbacks == []
        torch._dynamo.reset()
        model, x = Options().eval(), torch.randn(2, 8)
        plain = gp.compile(model, "watch_state", backend="eager")  # torch recompiles on each tag
        with torch.no_grad():
            for t in tags:
                plain(x, {"run_id": "run", "tag": t})
        assert [f.limit for f in gp.stats(plain).eager_fallbacks] == ["recompile_limit"]


def test_a_failing_non_value_guard_is_never_compared():
    """A policy that drops a value guard and an identity guard: the manager of the dropped
    guards that are not value guards (``FrameGuards.others``) fails when the function passed
    in changes, so that call is a violation without running the cached code."""
    torch._dynamo.reset()
    policy = gp.load("guardpolicy 1\nunsafe policy p {\n  drop when name == \"opts['run_id']\"\n"
                     "  drop when name == \"opts['act']\"\n  default keep\n  verify every 1 calls\n}\n")

    def forward(x, opts):
        return opts["act"](x) * (0 if opts["run_id"] == "debug" else 1)

    compiled = gp.compile(forward, policy, backend="eager")
    x = torch.randn(2, 8)
    compiled(x, {"run_id": "a", "act": torch.relu})
    [entry] = torch_internals.all_cache_entries(forward.__code__)
    frame = gp.stats(compiled).guards.get(entry)
    assert frame is not None and frame.others is not None
    run_id = gp.FailedGuard("opts['run_id']", "CONSTANT_MATCH", None)
    assert frame.only_values_fail((run_id,), {"x": x, "opts": {"run_id": "b", "act": torch.relu}})
    assert not frame.only_values_fail((run_id,), {"x": x, "opts": {"run_id": "b", "act": torch.tanh}})
    assert torch.equal(compiled(x, {"run_id": "b", "act": torch.tanh}), torch.tanh(x))
    st = gp.stats(compiled)
    assert st.checked_by_eager == 0 and len(st.violations) == 1 and st.compiles == 2
    assert torch.equal(compiled(x, {"run_id": "c", "act": torch.tanh}), torch.tanh(x))
    assert st.checked_by_eager == 1 and len(st.violations) == 1


def test_dry_run_says_a_failed_value_guard_would_have_skipped_a_recompile():
    torch._dynamo.reset()
    policy = gp.load("guardpolicy 1\nunsafe policy p {\n  " + RUN_ID + "\n  drop when name == \"x\"\n"
                     "  default keep\n}\n")
    model = Options().eval()
    compiled = gp.compile(model, policy, backend="eager", dry_run=True)
    x = torch.randn(2, 8)
    with torch.no_grad():
        for i in range(3):
            compiled(x, run_ids(i))
        compiled(x[:1].clone(), run_ids(2))  # a new shape: x's TENSOR_MATCH fails
    events = gp.stats(compiled).dry_run_events
    assert [(e.recompile.compile_id, [g.name for g in e.guards], e.known_stale) for e in events] == [
        ("0/1", ["opts['run_id']"], False), ("0/2", ["opts['run_id']"], False), ("0/3", ["x"], True)]
    text = gp.dry_run_report(compiled).to_text().splitlines()
    assert text[0].endswith("4 frame(s) compiled, 3 recompile(s) the policy would have skipped (1 known stale)")
    assert text[-3].startswith("  ! recompile 0/1 of forward: a dropped guard failed: the policy would have "
                               "skipped this recompile under <string>:3 (guard `opts['run_id']`, CONSTANT_MATCH "
                               "(a value guard: stale only if the code uses the value); entry 0/0;")
    assert text[-1].startswith("  ! recompile 0/3 of forward: this call would have served a stale result under "
                               "<string>:4 (guard `x`, TENSOR_MATCH; entry 0/")
    assert gp.dry_run_report(compiled).to_json()["events"][0]["known_stale"] is False
