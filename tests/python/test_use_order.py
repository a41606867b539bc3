"""A policy may ``use`` one declared later in its file, or one in another file (items come
in any order, docs/language.md). Issue 17 item 1: each of these killed the process."""

from __future__ import annotations

import pytest

import guardpolicy as gp

FORWARD = "guardpolicy 1\npolicy p0 { use p1 }\npolicy p1 { keep when is_global }\n"
ROWS = [{"guard_type": "ID_MATCH", "guard_source": "GLOBAL", "is_global": True},
        {"guard_type": "ID_MATCH", "guard_source": "LOCAL", "is_global": False}]


@pytest.mark.parametrize("name", ["p0", "p1"])
def test_load_either_policy_of_a_file_with_a_forward_use(tmp_path, name):
    path = tmp_path / "fwd.gpol"
    path.write_text(FORWARD)
    policy = gp.load(path, policy=name)
    assert policy.evaluate(ROWS) == [True, True]
    rules = [e.rule for e in policy.explain(ROWS)]
    assert str(rules[0]) == f"p1 at {path}:3"
    assert rules[1] is None  # the default of `name`
    assert gp.lint(path) == []


def test_forward_use_with_arguments_decides_by_them():
    source = ("guardpolicy 1\nunsafe policy outer { use inner(src = \"GLOBAL\") }\n"
              "unsafe policy inner(src: GuardSource = \"LOCAL\") { drop when guard_source == src }\n")
    assert gp.load(source, policy="outer").evaluate(ROWS) == [False, True]
    assert gp.load(source, policy="inner").evaluate(ROWS) == [True, False]


def test_forward_use_of_a_policy_that_uses_another_file():
    """``q`` comes after ``p`` and uses policies/std/skip_guard_on_globals.gpol."""
    source = "guardpolicy 1\nunsafe policy p { use q }\nunsafe policy q { use skip_guard_on_globals }\n"
    policy = gp.load(source, policy="p")
    assert policy.evaluate(ROWS) == [False, True]
    assert policy.explain(ROWS)[0].rule.policy == "skip_guard_on_globals"
