"""Every broken test plugin (``<build>/tests/plugins/*.so``, built by ``make build``) as a
``PluginError`` with its exact reason, the process going on after it, and plugin callbacks
failing inside guard_filter_fn under each ``on_error``. The test plugins that do load are all
named ``good`` and a plugin name loads once per process, so those run in a subprocess each and
report back as JSON (plugin_harness.run_python).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import guardpolicy as gp
from plugin_harness import bad_plugin, run_python

pytestmark = pytest.mark.usefixtures("example_plugins")


# --------------------------------------------------------------------------- broken plugins

# The exact PluginError text after "<path>: " (tests/cpp/plugin_test.cpp checks a prefix of
# each; here the whole reason).
ABI_HINT = "(ABI 1.0: the major must be equal and the minor not newer); rebuild the plugin against this plugin_api.h"
BAD_PLUGINS = {
    "no_entry": "not a guardpolicy plugin: no `gp_plugin_get_api` symbol",
    "null_table": "`gp_plugin_get_api` returned no table",
    "major": f"plugin ABI 2.0 is not supported by this guardpolicy {ABI_HINT}",
    "minor": f"plugin ABI 1.99 is not supported by this guardpolicy {ABI_HINT}",
    "small_table": "the plugin table is 16 bytes, smaller than an ABI 1.0 table (108 bytes)",
    "name": "plugin name `Bad-Name` is not [a-z_][a-z0-9_]* (at most 64 bytes, not a keyword)",
    "type": "plugin `good`: field `good.flag`: unknown type `float` (bool, int, string, an enum such as GuardType, "
            "or set:<Enum>)",
    "duplicate": "plugin `good` declares `twice` twice",
    "clash": "plugin `guard_source`: the name clashes with the schema field `guard_source`",
    "reads": "plugin `good`: field `good.flag`: reads `nosuch.field`, which is not a core schema field",
    "init": "plugin `good` failed to initialize: the bad plugin failed on purpose",
    "keyword": "plugin name `when` is not [a-z_][a-z0-9_]* (at most 64 bytes, not a keyword)",
    "text": "plugin `good`: field doc is not UTF-8 (byte 2)",
    "args": "plugin `good`: function `one` has 17 arguments, over the limit of 16",
}


@pytest.mark.parametrize("kind", sorted(BAD_PLUGINS))
def test_bad_plugin_is_a_plugin_error_and_the_process_goes_on(kind):
    path = bad_plugin(kind)
    before = gp.plugins()
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(path)
    assert str(info.value) == f"{path}: {BAD_PLUGINS[kind]}"
    # Nothing was registered, and the loaded plugins still work.
    assert gp.plugins() == before
    policy = gp.load("guardpolicy 1\nunsafe policy still_works {\n"
                     "  drop when names.depth(name) > 1 and modinfo.numel == 0\n}\n")
    assert policy.evaluate([{"name": "a.b.c", "modinfo.numel": 0}, {"name": "a"}]) == [False, True]


def test_not_a_shared_library(tmp_path):
    text = tmp_path / "not_a_plugin.so"
    text.write_text("#" * 200 + "\nthis is text, not an ELF shared library\n")
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(text)
    assert str(info.value) == f"{text}: cannot load the plugin: {text}: invalid ELF header"
    missing = tmp_path / "libmissing.so"
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(missing)
    assert str(info.value) == (f"{missing}: cannot load the plugin: {missing}: cannot open shared object file: "
                               "No such file or directory")


LOAD_ALL_BAD_THEN_GOOD = """
    import json, sys
    import guardpolicy as gp
    errors = {}
    for path in sys.argv[2:]:
        try:
            gp.load_plugin(path)
            errors[path] = None
        except gp.PluginError as e:
            errors[path] = str(e)
    names_before = [p.name for p in gp.plugins()]
    good = gp.load_plugin(sys.argv[1])
    policy = gp.filter("good.drop_all")
    print(json.dumps({"errors": errors, "before": names_before, "after": [p.name for p in gp.plugins()],
                      "good": [good.name, [f["name"] for f in good.fields], [f["name"] for f in good.functions],
                               [f["name"] for f in good.filters]],
                      "drop_all": policy.evaluate([{"name": "x"}, {}]),
                      "flag": gp.load("guardpolicy 1\\nunsafe policy f {\\n  drop when good.flag\\n}\\n").evaluate(
                          [{"good.flag": True}, {"good.flag": False}])}))
"""


def test_good_plugin_loads_after_every_bad_one():
    """In one fresh process: every broken plugin fails, then the valid `good` loads and its
    filter and field work."""
    bad = [bad_plugin(kind) for kind in sorted(BAD_PLUGINS)]
    out = run_python(LOAD_ALL_BAD_THEN_GOOD, bad_plugin("good"), *bad)
    assert out["errors"] == {path: f"{path}: {BAD_PLUGINS[Path(path).stem]}" for path in bad}
    assert out["before"] == ["builtin"]
    assert out["after"] == ["builtin", "good"]
    assert out["good"] == ["good", ["good.flag"], ["good.one"], ["good.drop_all"]]
    assert out["drop_all"] == [False, False]
    assert out["flag"] == [False, True]


# --------------------------------------------------------------------------- failing callbacks

FAILING_CALLBACK = """
    import json, sys, warnings
    import torch
    import guardpolicy as gp
    kind, path = sys.argv[1], sys.argv[2]
    gp.load_plugin(path)
    rule = {"extract": "drop when good.flag", "call": "drop when good.one(1) == 1", "filter": "use good.drop_all"}[kind]

    def f(x):
        return x * 2 + 1

    x = torch.arange(3.0)
    out = {}
    for on_error in ("keep", "drop", "raise"):
        policy = gp.load(f"guardpolicy 1\\n\\nunsafe policy p {{\\n  {rule}\\n  on_error {on_error}\\n}}\\n")
        calls = []

        def spy(entries):
            try:
                decisions = policy(entries)
            except Exception as e:
                calls.append({"n": len(entries), "raised": type(e).__name__, "message": str(e)})
                raise
            calls.append({"n": len(entries), "decisions": decisions})
            return decisions

        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = torch.compile(f, backend="eager", options={"guard_filter_fn": spy})(x)
                outcome = {"result_ok": bool(torch.equal(result, f(x)))}
            except Exception as e:
                chain, c = [], e
                while c is not None:
                    chain.append(type(c).__name__)
                    c = c.__cause__ or c.__context__
                outcome = {"chain": chain, "is_plugin_error": any(
                    isinstance(c, gp.PluginError) for c in [e, e.__cause__, e.__context__])}
        outcome["calls"] = calls
        outcome["warnings"] = [[w.category.__name__, str(w.message)] for w in caught
                               if issubclass(w.category, gp.PolicyRuntimeWarning)]
        out[on_error] = outcome
    # gp.compile also explains each compiled frame: still one warning per failing call.
    torch._dynamo.reset()
    policy = gp.load(f"guardpolicy 1\\n\\nunsafe policy p {{\\n  {rule}\\n}}\\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp.compile(f, policy, backend="eager")(x)
    out["gp_compile_warnings"] = sum(issubclass(w.category, gp.PolicyRuntimeWarning) for w in caught)
    # The process goes on: a policy without the plugin compiles and runs.
    torch._dynamo.reset()
    keep = gp.load_std("skip_guard_on_globals")
    out["after"] = bool(torch.equal(torch.compile(f, backend="eager", options={"guard_filter_fn": keep})(x), f(x)))
    print(json.dumps(out))
"""

CALLBACK_WHAT = {
    "extract": "field `good.flag`",
    "call": "function `good.one`",
    "filter": "filter `good.drop_all`",
}


@pytest.mark.parametrize("kind", ["extract", "call", "filter"])
def test_failing_callback_inside_guard_filter_fn(kind):
    """A plugin callback that fails inside torch.compile: on_error keep (the default) keeps
    every guard and warns PolicyRuntimeWarning naming the plugin file and its message;
    on_error drop drops them and warns; on_error raise raises PluginError out of the
    filter (torch wraps it)."""
    path = bad_plugin(kind)
    out = run_python(FAILING_CALLBACK, kind, path)
    reason = f"{path}: plugin `good`: {CALLBACK_WHAT[kind]}: the bad plugin failed on purpose"

    for on_error, keep in (("keep", True), ("drop", False)):
        got = out[on_error]
        assert got["result_ok"] is True
        (call,) = got["calls"]
        n = call["n"]
        assert n > 0 and call["decisions"] == [keep] * n
        assert got["warnings"] == [[
            "PolicyRuntimeWarning",
            f"guardpolicy: policy `p` could not read {n} of {n} guard entries ({reason}); on_error {on_error} "
            "decided them",
        ]]

    raised = out["raise"]
    (call,) = raised["calls"]
    assert call["raised"] == "PluginError" and call["message"] == reason
    assert raised["is_plugin_error"] is True, raised["chain"]
    assert raised["warnings"] == []
    assert out["gp_compile_warnings"] == 1
    assert out["after"] is True


def test_default_on_error_is_keep():
    assert gp.load("guardpolicy 1\nunsafe policy p {\n  drop when names.depth(name) > 3\n}\n").on_error == "keep"
