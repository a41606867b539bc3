"""guardpolicy.load rejects bad policies with PolicyError (located diagnostics); lint reports
the same problems without raising."""

from __future__ import annotations

import re

import pytest

import guardpolicy as gp

# Line 3: an unknown field at column 13; line 4: a string compared with an int at column 13;
# line 5: an unknown GuardSource member at column 29.
BAD = """guardpolicy 1
unsafe policy bad {
  drop when is_globl
  drop when name == 3
  drop when guard_source == LOCALL
  default keep
}
"""

GOOD = """guardpolicy 1

unsafe policy good {
  drop when is_global
  default keep
}
"""


@pytest.fixture
def bad_file(tmp_path):
    path = tmp_path / "bad.gpol"
    path.write_text(BAD)
    return path


def test_type_errors_raise_policy_error_with_locations(bad_file):
    with pytest.raises(gp.PolicyError) as info:
        gp.load(bad_file)
    err = info.value
    text = str(err)
    assert f"{bad_file}:3:13: error[GP2001]" in text
    assert f"{bad_file}:4:13: error[GP2003]" in text
    assert f"{bad_file}:5:29: error[GP2002]" in text
    assert "is_globl" in text and "did you mean `is_global`?" in text

    diags = err.diagnostics
    assert [d.code for d in diags] == ["GP2001", "GP2003", "GP2002"]
    assert all(isinstance(d, gp.Diagnostic) for d in diags)
    assert all(d.severity == "error" and d.file == str(bad_file) for d in diags)
    assert [(d.line, d.column) for d in diags] == [(3, 13), (4, 13), (5, 29)]
    assert (diags[0].end_line, diags[0].end_column) == (3, 21)  # `is_globl` is 8 bytes
    assert "unknown field `is_globl`" in diags[0].message
    assert diags[0].help == "did you mean `is_global`?"
    assert "LOCALL" in diags[2].message and diags[2].help == "did you mean `LOCAL`?"
    # Rendered text carries the source line and a caret under the range.
    assert diags[0].rendered.splitlines()[1].endswith("drop when is_globl")
    assert diags[0].rendered.splitlines()[2].endswith(" " * 12 + "^" * 8)
    assert str(diags[0]) == diags[0].rendered


def test_path_given_as_str_is_the_same(bad_file):
    with pytest.raises(gp.PolicyError) as info:
        gp.load(str(bad_file))
    assert f"{bad_file}:3:13" in str(info.value)


def test_source_text_errors_are_located_in_string():
    with pytest.raises(gp.PolicyError) as info:
        gp.load(BAD)
    assert "<string>:3:13: error[GP2001]" in str(info.value)
    assert [d.code for d in info.value.diagnostics] == ["GP2001", "GP2003", "GP2002"]


@pytest.mark.parametrize(
    "line, code",
    [
        ("drop when value.colour == 1", "GP2001"),
        ("drop when guard_type == 3", "GP2003"),
        ("drop when source.depth == \"deep\"", "GP2003"),
        ("drop when guard_source in {LOCAL, NOWHERE}", "GP2002"),
        ("drop when name", "GP2004"),
        ("drop when name matches \"(\"", "GP2009"),
        ("config no_such_knob = true", "GP2010"),
        ("stance warp_speed after 3 calls", "GP2011"),
        ("on_error explode", "GP2014"),
        ("use no_such_policy", "GP2005"),
    ],
)
def test_single_error_codes(tmp_path, line, code):
    path = tmp_path / "one.gpol"
    path.write_text(f"guardpolicy 1\nunsafe policy one {{\n  {line}\n  default keep\n}}\n")
    with pytest.raises(gp.PolicyError) as info:
        gp.load(path)
    errors = [d for d in info.value.diagnostics if d.severity == "error"]
    assert [d.code for d in errors] == [code], info.value
    assert errors[0].line == 3
    assert re.search(rf"{re.escape(str(path))}:3:\d+: error\[{code}\]", str(info.value))


def test_drop_without_unsafe_is_an_error():
    with pytest.raises(gp.PolicyError) as info:
        gp.load("guardpolicy 1\npolicy p {\n  drop when is_global\n}\n")
    assert [d.code for d in info.value.diagnostics] == ["GP3001"]


def test_wrong_version_and_syntax():
    with pytest.raises(gp.PolicyError) as info:
        gp.load("guardpolicy 2\npolicy p { keep when is_global }\n")
    assert "GP1002" in [d.code for d in info.value.diagnostics]
    with pytest.raises(gp.PolicyError) as info:
        gp.load("guardpolicy 1\npolicy p { keep when when }\n")
    assert info.value.diagnostics[0].code == "GP1001"
    assert info.value.diagnostics[0].line == 2


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.gpol"
    with pytest.raises(gp.PolicyError) as info:
        gp.load(missing)
    assert [d.code for d in info.value.diagnostics] == ["GP0001"]
    assert str(missing) in str(info.value)
    with pytest.raises(gp.PolicyError):
        gp.load(str(missing))


def test_directory(tmp_path):
    with pytest.raises(gp.PolicyError) as info:
        gp.load(tmp_path)
    assert [d.code for d in info.value.diagnostics] == ["GP0001"]
    assert "directory" in str(info.value)


def test_several_policies_need_policy_argument(tmp_path):
    path = tmp_path / "two.gpol"
    path.write_text(
        "guardpolicy 1\n"
        "unsafe policy first { drop when is_global }\n"
        "unsafe policy second { drop when guard_type == ID_MATCH }\n"
    )
    with pytest.raises(gp.PolicyError) as info:
        gp.load(path)
    assert [d.code for d in info.value.diagnostics] == ["GP4001"]
    assert "`first`" in str(info.value) and "`second`" in str(info.value)

    assert gp.load(path, policy="second").name == "second"
    with pytest.raises(gp.PolicyError) as info:
        gp.load(path, policy="thrid")
    assert [d.code for d in info.value.diagnostics] == ["GP4001"]


def test_file_without_policy(tmp_path):
    path = tmp_path / "empty.gpol"
    path.write_text("guardpolicy 1\n")
    with pytest.raises(gp.PolicyError) as info:
        gp.load(path)
    assert [d.code for d in info.value.diagnostics] == ["GP4001"]


@pytest.mark.parametrize(
    "params",
    [
        {"keep_parameters": 3},
        {"keep_parameters": "yes"},
        {"keep_params": True},
        {"keep_parameters": True, "extra": 1},
    ],
)
def test_bad_parameter_values(params):
    with pytest.raises(gp.PolicyError) as info:
        gp.load_std("keep_tensor_guards", **params)
    assert "GP4002" in [d.code for d in info.value.diagnostics]


def test_parameter_of_unsupported_python_type():
    with pytest.raises((gp.PolicyError, TypeError)):
        gp.load_std("keep_tensor_guards", keep_parameters=1.5)


def test_parameter_on_policy_without_parameters():
    with pytest.raises(gp.PolicyError) as info:
        gp.load_std("skip_all_guards", keep_parameters=True)
    assert "GP4002" in [d.code for d in info.value.diagnostics]


def test_unknown_std_name():
    with pytest.raises(KeyError):
        gp.load_std("skip_everything")


def test_lint_returns_diagnostics_without_raising(bad_file):
    diags = gp.lint(bad_file)
    assert [d.code for d in diags] == ["GP2001", "GP2003", "GP2002"]
    assert [(d.line, d.column) for d in diags] == [(3, 13), (4, 13), (5, 29)]
    assert gp.lint(BAD)[0].file == "<string>"
    # I/O problems are diagnostics too.
    missing = gp.lint(bad_file.parent / "missing.gpol")
    assert [d.code for d in missing] == ["GP0001"]
    assert [d.code for d in gp.lint(bad_file.parent)] == ["GP0001"]


def test_lint_clean_and_warnings(tmp_path):
    assert gp.lint(GOOD) == []
    # The std policies have no errors; the analysis warns only about their real risks.
    # (SHAPE_ENV, GLOBAL_STATE, input tensors, the value guards of the other inputs)
    risks = {"keep_tensor_guards": ["GP3008"] * 3, "keep_portable_guards": ["GP3008"],
             "skip_all_guards": ["GP3009"] + ["GP3008"] * 4}
    for name in gp.STD_POLICIES:
        diags = gp.lint(gp.std_policy_path(name))
        assert all(d.severity == "warning" for d in diags), name
        assert [d.code for d in diags] == risks.get(name, []), name
    # An unknown guard type is only a warning (GuardType is open); the policy still loads.
    src = "guardpolicy 1\nunsafe policy p {\n  drop when guard_type == _vendor_TENSOR_MATCH\n}\n"
    diags = gp.lint(src)
    assert [(d.severity, d.code) for d in diags] == [("warning", "GP2012")]
    policy = gp.load(src)
    assert policy.evaluate([{"guard_type": "_vendor_TENSOR_MATCH"}, {"guard_type": "TENSOR_MATCH"}]) == [False, True]


# --------------------------------------------------------------------------- on_error syntax


def on_error_source(action: str) -> str:
    return f"guardpolicy 1\nunsafe policy p {{\n  drop when is_global\n  on_error {action}\n}}\n"


@pytest.mark.parametrize("action", ["keep", "drop", "raise"])
def test_on_error_actions_parse(action):
    """docs/language.md: `on_error keep|drop|raise`. `keep` and `drop` are keywords."""
    assert gp.lint(on_error_source(action)) == []
    assert gp.load(on_error_source(action)).on_error == action


def test_unknown_on_error_action():
    diags = gp.lint(on_error_source("ignore"))
    assert [(d.code, d.line, d.column) for d in diags] == [("GP2014", 4, 12)]


def test_missing_on_error_action_is_only_a_syntax_error():
    """A syntax error should not also produce a GP2014 about `<missing IDENT>` at 1:1."""
    diags = gp.lint(on_error_source(""))
    assert diags and all(d.code == "GP1001" for d in diags), [(d.code, d.line, d.column, d.message) for d in diags]


# --------------------------------------------------------------------------- enum parameters

ENUM_PARAMS = """guardpolicy 1
unsafe policy by_source(s: GuardSource = "LOCAL", t: GuardType = "ID_MATCH") {
  drop when guard_source == s
  drop when guard_type == t
}
"""


def test_enum_parameters_bind_by_name():
    p = gp.load(ENUM_PARAMS, s="GLOBAL", t="_vendor_MATCH")  # GuardType is open
    rows = [{"guard_source": "LOCAL", "guard_type": "TENSOR_MATCH"},
            {"guard_source": "GLOBAL", "guard_type": "TENSOR_MATCH"},
            {"guard_source": "CONSTANT", "guard_type": "ID_MATCH"},
            {"guard_source": "CONSTANT", "guard_type": "_vendor_MATCH"}]
    assert p.evaluate(rows) == [True, False, True, False]
    assert gp.load(ENUM_PARAMS).evaluate(rows) == [False, True, False, True]


def test_enum_parameter_default_must_be_a_member():
    with pytest.raises(gp.PolicyError) as info:
        gp.load(ENUM_PARAMS.replace('"LOCAL"', '"NOWHERE"'))
    assert [d.code for d in info.value.diagnostics] == ["GP2006"]


def test_closed_enum_parameter_value_must_be_a_member():
    """GuardSource is closed: a load-time value outside it is as wrong as a default outside it."""
    with pytest.raises(gp.PolicyError) as info:
        gp.load(ENUM_PARAMS, s="NOWHERE")
    assert [d.code for d in info.value.diagnostics if d.severity == "error"] == ["GP4002"]


def test_misspelt_guard_type_is_an_error_and_a_new_one_a_warning():
    """Issue 17 item 11: `TENSOR_MACH` (2 edits from TENSOR_MATCH) would never fire."""
    diags = gp.lint("guardpolicy 1\nunsafe policy p {\n  drop when guard_type == TENSOR_MACH\n}\n")
    assert [(d.severity, d.code, d.message, d.help) for d in diags] == [
        ("error", "GP2002", "unknown GuardType `TENSOR_MACH`", "did you mean `TENSOR_MATCH`?")]
    new = gp.lint("guardpolicy 1\nunsafe policy p {\n  drop when guard_type == _spyre_TENSOR_MATCH\n}\n")
    assert [(d.severity, d.code, d.help) for d in new] == [
        ("warning", "GP2012", "third-party guard types are allowed; check the spelling")]
    with pytest.raises(gp.PolicyError) as info:
        gp.load(ENUM_PARAMS, t="TENSOR_MACH")
    errors = [d for d in info.value.diagnostics if d.severity == "error"]
    assert [(d.code, d.help) for d in errors] == [("GP4002", "did you mean `TENSOR_MATCH`?")]


# A wrong argument type is a TypeError in the API's words, never pybind11's listing of the
# native signature ("incompatible function arguments ... (text: str, path: bytes, ...)").
@pytest.mark.parametrize("call, message", [
    (lambda p: gp.load(p, policy=3), "policy must be a str, not int"),
    (lambda p: gp.load(p, policy=["good"]), "policy must be a str, not list"),
    (lambda p: gp.load_plugin(gp.example_plugin_path("names"), config=5), "config must be a str, not int"),
    (lambda p: gp.filter(7), "name must be a str, not int"),
    (lambda p: gp.load_std(None), "name must be a str, not NoneType"),
    (lambda p: gp.example_plugin_path(1), "name must be a str, not int"),
])
def test_wrong_argument_types_are_plain_type_errors(tmp_path, call, message):
    path = tmp_path / "good.gpol"
    path.write_text(GOOD)
    with pytest.raises(TypeError) as info:
        call(path)
    assert str(info.value) == message


# Policy.evaluate's rows too: the field and the types, not pybind11's "Unable to cast Python
# instance ..." nor CPython's "bad argument type for built-in operation".
@pytest.mark.parametrize("condition, row, message", [
    ("is_global", {"is_global": "x"}, "entry 0: field `is_global` must be a bool, not str"),
    ('name == "x"', {"name": 3}, "entry 0: field `name` must be a str, not int"),
    ("guard_type == TENSOR_MATCH", {"guard_type": 3}, "entry 0: field `guard_type` must be a str (a member name), not int"),
    ("derived_guard_types contains TENSOR_MATCH", {"derived_guard_types": [3]},
     "entry 0: field `derived_guard_types` must be a list of member names (str), not int"),
    ("user_frame.line > 3", {"user_frame.line": "3"}, "entry 0: field `user_frame.line` must be an int, not str"),
    ("user_frame.line > 3", {"user_frame.line": 2**70}, "entry 0: field `user_frame.line` is out of the 64-bit range"),
])
def test_evaluate_row_of_the_wrong_type_is_a_plain_type_error(condition, row, message):
    policy = gp.load(f"guardpolicy 1\nunsafe policy p {{ drop when {condition} }}\n")
    with pytest.raises(TypeError) as info:
        policy.evaluate([row])
    assert str(info.value) == message
    assert policy.evaluate([{k: None for k in row}]) == [True]  # absent: false, 0, "", no member


def _compile_error(name):
    """The PolicyError of ``gp.compile(Linear, name)`` where no file of that name exists."""
    import torch

    with pytest.raises(gp.PolicyError) as info:
        gp.compile(torch.nn.Linear(2, 2), name, backend="eager")
    return info.value


def test_a_std_policy_name_given_as_a_path_hints_at_load_std(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name here
    error = _compile_error("skip_guard_on_all_nn_modules")
    assert str(error).splitlines() == [
        "error[GP0001]: cannot read `skip_guard_on_all_nn_modules`: No such file or directory",
        "  = help: `skip_guard_on_all_nn_modules` is a standard policy: "
        "gp.load_std('skip_guard_on_all_nn_modules') loads it"]
    assert [d.code for d in error.diagnostics] == ["GP0001"]


def test_a_misspelt_standard_policy_name_says_which_it_looks_like(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name here
    assert str(_compile_error("watch_stat")).splitlines() == [
        "error[GP0001]: cannot read `watch_stat`: No such file or directory",
        "  = help: did you mean the standard policy `watch_state`?"]
    with pytest.raises(gp.PolicyError) as info:
        gp.load("nothing_like_it")
    assert "did you mean" not in str(info.value)
