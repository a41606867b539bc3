"""Plugins in the registry and the checker: the example plugins (``modinfo``: fields read
from the guarded Python value; ``names``: a function and a filter over guard names) as
``gp.plugins()`` and ``gp.filters()`` describe them, a second load of a loaded plugin refused,
and misspelt or mistyped plugin fields, functions and filters as diagnostics. The helpers
the test_plugins_*.py files share are in plugin_harness.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import guardpolicy as gp
from conftest import EXAMPLE_PLUGIN_ORDER
from plugin_harness import lint_one

pytestmark = pytest.mark.usefixtures("example_plugins")


# --------------------------------------------------------------------------- registry


def test_example_plugins_declarations(example_plugins):
    assert gp.EXAMPLE_PLUGINS == ("modinfo", "names")
    for name in gp.EXAMPLE_PLUGINS:
        path = Path(gp.example_plugin_path(name))
        assert path.is_file() and path.name == f"libgp_{name}.so"
    with pytest.raises(KeyError, match="no example plugin 'nosuch'; known: modinfo, names"):
        gp.example_plugin_path("nosuch")

    plugins = gp.plugins()
    assert [p.name for p in plugins] == ["builtin", *EXAMPLE_PLUGIN_ORDER]
    by_name = {p.name: p for p in plugins}
    assert by_name["names"] == example_plugins["names"] and by_name["modinfo"] == example_plugins["modinfo"]

    builtin = by_name["builtin"]
    assert (builtin.path, builtin.api_version, builtin.fields, builtin.functions) == ("builtin", "1.0", (), ())
    assert sorted(f["name"] for f in builtin.filters) == sorted(f"builtin.{n}" for n in gp.STD_POLICIES)

    modinfo = by_name["modinfo"]
    assert (modinfo.version, modinfo.api_version, modinfo.path) == ("1.0.0", "1.0", gp.example_plugin_path("modinfo"))
    assert modinfo.description == "fields read from the guarded Python value: class name, tensor dtype and size"
    assert [(f["name"], f["type"]) for f in modinfo.fields] == [
        ("modinfo.class_name", "string"),
        ("modinfo.dtype", "string"),
        ("modinfo.numel", "int"),
    ]
    assert all(f["doc"] for f in modinfo.fields)
    assert modinfo.functions == () and modinfo.filters == ()

    names = by_name["names"]
    assert (names.version, names.api_version, names.path) == ("1.0.0", "1.0", gp.example_plugin_path("names"))
    assert names.description == "guard-name depth: a function and a filter"
    assert names.fields == ()
    assert [(f["name"], f["args"], f["result"]) for f in names.functions] == [("names.depth", ["string"], "int")]
    assert [(f["name"], f["params"]) for f in names.filters] == [("names.drop_deep", [("max_depth", "int", 4, True)])]
    assert names.filters[0]["doc"] == "drop guards on names nested deeper than max_depth"


def test_plugin_filter_in_registry():
    (info,) = [f for f in gp.filters() if f.kind == "plugin"]
    assert info == gp.FilterInfo("names.drop_deep", "plugin", "drop guards on names nested deeper than max_depth",
                                 (gp.FilterParam("max_depth", "int", 4, True),), gp.example_plugin_path("names"))
    bound = gp.filter("names.drop_deep", max_depth=2)
    assert (bound.params, bound.doc) == ({"max_depth": 2}, "drop guards on names nested deeper than max_depth")
    assert gp.filter("names.drop_deep").params == {"max_depth": 4}
    with pytest.raises(gp.PolicyError) as unknown:
        gp.filter("names.drop_dep")
    (d,) = unknown.value.diagnostics
    assert (d.code, d.message, d.help) == ("GP4001", "no filter named `names.drop_dep`", "did you mean `names.drop_deep`?")
    with pytest.raises(gp.PolicyError):
        gp.filter("names.drop_deep", max_depth="deep")


def test_second_load_of_a_loaded_plugin_is_refused():
    path = gp.example_plugin_path("names")
    before = gp.plugins()
    with pytest.raises(gp.PluginError) as info:
        gp.load_plugin(path)
    assert str(info.value) == f"{path}: plugin `names`: a plugin with this name is already loaded"
    assert gp.plugins() == before


# --------------------------------------------------------------------------- checker


def test_misspelt_plugin_field_is_gp2001_with_did_you_mean():
    d = lint_one('guardpolicy 1\nunsafe policy p { drop when modinfo.clas_name == "Linear" }\n')
    assert (d.code, d.severity, d.message) == ("GP2001", "error", "unknown field `modinfo.clas_name`")
    assert d.help == "did you mean `modinfo.class_name`?"
    assert (d.line, d.column) == (2, 29)


def test_misspelt_plugin_function_is_gp2016_with_did_you_mean():
    d = lint_one("guardpolicy 1\nunsafe policy p { drop when names.dept(name) > 3 }\n")
    assert (d.code, d.severity, d.message) == ("GP2016", "error", "unknown function `names.dept`")
    assert d.help == "did you mean `names.depth`?"


def test_misspelt_plugin_filter_is_gp2005_with_did_you_mean():
    d = lint_one("guardpolicy 1\nunsafe policy p { use names.drop_dep(max_depth = 3) }\n")
    assert (d.code, d.message) == ("GP2005", "unknown policy `names.drop_dep`")
    assert d.help == "did you mean `names.drop_deep`?"


def test_plugin_calls_are_type_checked():
    d = lint_one("guardpolicy 1\nunsafe policy p { drop when names.depth(1) > 3 }\n")
    assert d.code == "GP2017"
    d = lint_one('guardpolicy 1\nunsafe policy p { drop when modinfo.numel == "16" }\n')
    assert d.severity == "error"
