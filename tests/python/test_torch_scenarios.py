"""PyTorch's own guard_filter_fn scenarios (test/dynamo/test_misc.py), redone with policies
written in the guardpolicy language.

Every scenario proves two things after a change that a kept guard would catch:
* no recompile (``set_stance("fail_on_recompile")`` / ``error_on_recompile=True``), and
* the stale output of the first compilation, which differs from what eager now gives:
  the guard really was gone.
A control compiles the same code without a filter and shows the same change recompiles.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import guardpolicy as gp
from conftest import compile_with

RECOMPILE = r"(?i)recompil"  # the fail_on_recompile and error_on_recompile messages


def fail_on_recompile():
    return torch.compiler.set_stance("fail_on_recompile")


def error_on_recompile():
    return torch._dynamo.config.patch(error_on_recompile=True)


def load_unsafe(source: str) -> gp.Policy:
    assert source.startswith("guardpolicy 1")
    policy = gp.load(source)
    assert policy.is_unsafe
    return policy


# --------------------------------------------------------------------------- ID_MATCH

DROP_ID_MATCH = """guardpolicy 1

unsafe policy drop_id_match {
  doc "torch test_guard_filter_fn_by_id"
  drop when guard_type == ID_MATCH
  default keep
}
"""


def return_id(x):
    return id(x)


def test_drop_id_match_returns_stale_id():
    policy = load_unsafe(DROP_ID_MATCH)
    x = torch.randn(2)
    compiled = compile_with(return_id, policy, fullgraph=True)
    assert compiled(x) == id(x)

    new_x = torch.randn(2)
    assert return_id(new_x) != id(x)  # eager sees the new object
    with fail_on_recompile():
        stale = compiled(new_x)
    assert stale == id(x)


def test_drop_id_match_control_recompiles():
    x = torch.randn(2)
    compiled = compile_with(return_id, None, fullgraph=True)
    assert compiled(x) == id(x)
    new_x = torch.randn(2)
    with fail_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(new_x)
    # Outside the stance it recompiles and is right again.
    assert compiled(new_x) == id(new_x)


def test_id_match_guard_is_offered_and_dropped(capture):
    policy = load_unsafe(DROP_ID_MATCH)
    entries = capture(return_id, torch.randn(2), fullgraph=True)
    id_entries = [e for e in entries if e.guard_type == "ID_MATCH"]
    assert [e.name for e in id_entries] == ["x"]
    decisions = dict(zip(map(id, entries), policy(entries)))
    assert all(decisions[id(e)] == (e.guard_type != "ID_MATCH") for e in entries)


# --------------------------------------------------------------------------- globals

SCENARIO_GLOBAL = 1


def add_scenario_global(x):
    return x + SCENARIO_GLOBAL


DROP_GLOBALS = """guardpolicy 1

unsafe policy drop_globals {
  doc "torch test_guard_filter_fn_by_is_global"
  drop when is_global
}
"""


@pytest.fixture
def scenario_global():
    global SCENARIO_GLOBAL
    SCENARIO_GLOBAL = 1
    yield
    SCENARIO_GLOBAL = 1


def set_scenario_global(value):
    global SCENARIO_GLOBAL
    SCENARIO_GLOBAL = value


@pytest.mark.usefixtures("scenario_global")
def test_drop_globals_gives_stale_global():
    policy = load_unsafe(DROP_GLOBALS)
    x = torch.arange(4.0)
    compiled = compile_with(add_scenario_global, policy)
    torch.testing.assert_close(compiled(x), x + 1)

    set_scenario_global(2)
    fresh = add_scenario_global(x)
    torch.testing.assert_close(fresh, x + 2)
    with error_on_recompile():
        stale = compiled(x)
    torch.testing.assert_close(stale, x + 1)
    assert not torch.equal(stale, fresh)


@pytest.mark.usefixtures("scenario_global")
def test_std_skip_guard_on_globals_gives_stale_global():
    policy = gp.load_std("skip_guard_on_globals")
    x = torch.arange(4.0)
    compiled = compile_with(add_scenario_global, policy)
    torch.testing.assert_close(compiled(x), x + 1)
    set_scenario_global(5)
    with fail_on_recompile():
        stale = compiled(x)
    torch.testing.assert_close(stale, x + 1)
    assert not torch.equal(stale, add_scenario_global(x))


@pytest.mark.usefixtures("scenario_global")
def test_globals_control_recompiles():
    x = torch.arange(4.0)
    compiled = compile_with(add_scenario_global, None)
    torch.testing.assert_close(compiled(x), x + 1)
    set_scenario_global(2)
    with error_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(x)


# --------------------------------------------------------------------------- name and value

# torch: `not (e.name == "y" and e.value is None)`. value.type is
# type(value).__module__ + "." + type(value).__qualname__, so None reads "builtins.NoneType".
DROP_Y_NONE = """guardpolicy 1

unsafe policy drop_y_none {
  doc "torch test_guard_filter_fn_by_name_and_value"
  drop when name == "y" and has_value and value.type == "builtins.NoneType"
  default keep
}
"""


def add_optional(x, y):
    x = x * 2  # some work, so Dynamo keeps a graph (and its guards) for the frame
    if y is not None:
        x = x + y
    return x


def test_value_type_of_none_is_builtins_nonetype(capture):
    policy = load_unsafe(DROP_Y_NONE)
    entries = capture(add_optional, torch.arange(3.0), None)
    y_entries = [e for e in entries if e.name == "y"]
    assert y_entries and all(e.value is None and e.has_value for e in y_entries)
    assert f"{type(None).__module__}.{type(None).__qualname__}" == "builtins.NoneType"
    # The policy agrees with torch's own filter from the test, entry by entry.
    assert policy(entries) == [not (e.name == "y" and e.value is None) for e in entries]
    assert False in policy(entries)
    # And `value.type` really reads the value's type: a policy matching on it sees the names.
    probe = gp.load('guardpolicy 1\nunsafe policy probe { drop when value.type == "builtins.NoneType" }\n')
    assert [not keep for keep in probe(entries)] == [e.has_value and e.value is None for e in entries]


def test_drop_by_name_and_value_gives_stale_output():
    policy = load_unsafe(DROP_Y_NONE)
    x = torch.arange(3.0)
    compiled = compile_with(add_optional, policy)
    torch.testing.assert_close(compiled(x, None), x * 2)

    y = torch.tensor(1.0)
    fresh = add_optional(x, y)
    torch.testing.assert_close(fresh, x * 2 + 1)
    with fail_on_recompile():
        stale = compiled(x, y)
    torch.testing.assert_close(stale, x * 2)  # y was ignored: the None guard was dropped
    assert not torch.equal(stale, fresh)


def test_name_and_value_control_recompiles():
    x = torch.arange(3.0)
    compiled = compile_with(add_optional, None)
    compiled(x, None)
    with fail_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(x, torch.tensor(1.0))


def test_name_alone_is_not_enough():
    """Same name rule, but the value test does not hold for a tensor y: the guard stays."""
    policy = load_unsafe(DROP_Y_NONE)
    x = torch.arange(3.0)
    compiled = compile_with(add_optional, policy)
    torch.testing.assert_close(compiled(x, torch.tensor(1.0)), x * 2 + 1)
    with fail_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(x, None)


# --------------------------------------------------------------------------- nn modules


class NormMod(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x)


USE_INBUILT = """guardpolicy 1

unsafe policy serving_inbuilt {
  use skip_guard_on_inbuilt_nn_modules
  default keep
}
"""


@pytest.mark.parametrize("how", ["std", "use"])
def test_inbuilt_nn_module_eps_change_is_not_seen(how):
    policy = gp.load_std("skip_guard_on_inbuilt_nn_modules") if how == "std" else load_unsafe(USE_INBUILT)
    torch.manual_seed(0)
    mod = NormMod()
    x = torch.randn(2, 8) * 0.1  # small variance, so eps matters
    compiled = compile_with(mod, policy)
    before = compiled(x)
    torch.testing.assert_close(before, mod(x))

    mod.norm.eps = 1.0
    fresh = mod(x)
    assert not torch.allclose(fresh, before, atol=1e-3)
    with error_on_recompile():
        stale = compiled(x)
    torch.testing.assert_close(stale, before)


def test_inbuilt_nn_module_control_recompiles():
    torch.manual_seed(0)
    mod = NormMod()
    x = torch.randn(2, 8)
    compiled = compile_with(mod, None)
    compiled(x)
    mod.norm.eps = 1.0
    with error_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(x)


class ScaleMod(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, x):
        return x * self.c


def test_user_nn_module_attribute_change_is_not_seen():
    policy = gp.load_std("skip_guard_on_all_nn_modules")
    mod = ScaleMod(2)
    x = torch.arange(4.0)
    compiled = compile_with(mod, policy)
    torch.testing.assert_close(compiled(x), x * 2)

    mod.c = 3
    fresh = mod(x)
    torch.testing.assert_close(fresh, x * 3)
    with error_on_recompile():
        stale = compiled(x)
    torch.testing.assert_close(stale, x * 2)
    assert not torch.equal(stale, fresh)


def test_inbuilt_only_policy_keeps_user_module_guard():
    """skip_guard_on_inbuilt_nn_modules does not cover a user module: `self.c` still guards."""
    policy = gp.load_std("skip_guard_on_inbuilt_nn_modules")
    mod = ScaleMod(2)
    x = torch.arange(4.0)
    compiled = compile_with(mod, policy)
    compiled(x)
    mod.c = 3
    with error_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(x)


def test_user_nn_module_control_recompiles():
    mod = ScaleMod(2)
    x = torch.arange(4.0)
    compiled = compile_with(mod, None)
    compiled(x)
    mod.c = 3
    with fail_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(x)


def test_keep_tensor_guards_float_attribute_change_is_not_seen():
    policy = gp.load_std("keep_tensor_guards")
    mod = ScaleMod(2.0)
    x = torch.arange(4.0)
    compiled = compile_with(mod, policy)
    torch.testing.assert_close(compiled(x), x * 2.0)

    mod.c = 3.0
    fresh = mod(x)
    torch.testing.assert_close(fresh, x * 3.0)
    with error_on_recompile():
        stale = compiled(x)
    torch.testing.assert_close(stale, x * 2.0)
    assert not torch.equal(stale, fresh)


def test_keep_tensor_guards_still_guards_tensors():
    """The tensor guard on the input is kept: a new dtype recompiles."""
    policy = gp.load_std("keep_tensor_guards")
    mod = ScaleMod(2.0)
    compiled = compile_with(mod, policy)
    compiled(torch.arange(4.0))
    with fail_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(torch.arange(4, dtype=torch.float64))


def test_keep_tensor_guards_control_recompiles():
    mod = ScaleMod(2.0)
    x = torch.arange(4.0)
    compiled = compile_with(mod, None)
    compiled(x)
    mod.c = 3.0
    with error_on_recompile(), pytest.raises(Exception, match=RECOMPILE):
        compiled(x)
