"""Plugins from the command line and in the example policies: each example's header command
lints and tests the file as written, ``--plugin`` with lint, check, test and filters, plugin
paths and NUL bytes; a filter call that leaves out defaulted parameters, and
``Policy.evaluate`` extracting plugin fields a row does not give.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import guardpolicy as gp
from conftest import capture_entries
from plugin_harness import (BAD_PLUGIN_DIR, CLI, MODULE_KINDS, ROOT, SHALLOW_GUARDS, bad_plugin, lint_one, run_cli,
                            run_python)

pytestmark = pytest.mark.usefixtures("example_plugins")


# --------------------------------------------------------------------------- example policies


@pytest.mark.parametrize(("path", "plugin"), [(MODULE_KINDS, "modinfo"), (SHALLOW_GUARDS, "names")],
                         ids=["module_kinds", "shallow_guards"])
def test_example_header_names_its_plugin_and_lint_command(path, plugin):
    """The header comment's lint command, run as written (with .venv/bin first on PATH),
    lints the file clean; without the plugin the same file does not check."""
    text = path.read_text()
    command = next(line[1:].strip() for line in text.splitlines() if line.startswith("#   guardpolicy lint --plugin"))
    assert command == (f"guardpolicy lint --plugin $(python -c 'import guardpolicy as gp; "
                       f"print(gp.example_plugin_path(\"{plugin}\"))') policies/examples/{path.name}")
    env = {**os.environ, "PATH": f"{CLI.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    test_cmd = command.replace("guardpolicy lint", "guardpolicy test", 1)
    assert f"#   {test_cmd}" in text
    proc = subprocess.run(["bash", "-c", test_cmd], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\d+ passed, 0 failed$", proc.stdout, re.M), proc.stdout

    bare = run_cli("lint", path)
    assert bare.returncode == 1
    codes = set(re.findall(r"error\[(GP\d{4})\]", bare.stderr))
    assert codes == ({"GP2001", "GP2015"} if plugin == "modinfo" else {"GP2016", "GP2005"}), bare.stderr
    assert "--plugin" in bare.stderr or plugin == "modinfo"


def test_cli_lint_with_plugin_reports_plugin_diagnostics(tmp_path):
    bad = tmp_path / "bad.gpol"
    bad.write_text('guardpolicy 1\nunsafe policy bad {\n  drop when modinfo.clas_name == "Linear"\n}\n')
    proc = run_cli("lint", bad, "--plugin", gp.example_plugin_path("modinfo"))
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert f"{bad}:3:13: error[GP2001]: unknown field `modinfo.clas_name`" in lines
    assert "  = help: did you mean `modinfo.class_name`?" in lines


def test_cli_bad_plugin_is_a_usage_error(tmp_path):
    path = bad_plugin("major")
    proc = run_cli("lint", MODULE_KINDS, "--plugin", path)
    assert proc.returncode == 2
    assert f"{path}: plugin ABI 2.0 is not supported by this guardpolicy" in proc.stderr


def test_cli_check_with_plugin_matches_live_decisions(tmp_path, mlp_model):
    """`guardpolicy check --plugin libgp_names.so shallow_guards.gpol --guards snap.json`
    decides every recorded guard like the live policy did on the GuardFilterEntry objects."""
    from guardpolicy.tools.capture import capture

    snapshot = capture(mlp_model.fn, *mlp_model.args)
    snap = tmp_path / "mlp.json"
    snapshot.to_json(snap)
    live = gp.load(SHALLOW_GUARDS)(capture_entries(mlp_model.fn, *mlp_model.args))
    assert gp.load(SHALLOW_GUARDS).evaluate(snapshot.rows()) == live

    proc = run_cli("check", SHALLOW_GUARDS, "--guards", snap, "--explain", "--plugin", gp.example_plugin_path("names"))
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("  ") and not ln.lstrip().startswith("|")]
    assert [ln[0] for ln in lines] == ["keep" if k else "drop" for k in live]
    assert any(" ".join(ln).endswith(f"names.drop_deep at {SHALLOW_GUARDS}:20") for ln in lines if ln[0] == "drop")
    kept = sum(live)
    assert f"{len(live)} guards in 1 frames: {kept} kept, {len(live) - kept} dropped" in proc.stdout

    # Without the plugin the policy does not check; a snapshot has no Python values, so
    # modinfo's fields cannot be read from it (a clear error, exit 2).
    assert run_cli("check", SHALLOW_GUARDS, "--guards", snap).returncode == 1
    no_value = run_cli("check", MODULE_KINDS, "--guards", snap, "--plugin", gp.example_plugin_path("modinfo"))
    assert no_value.returncode == 2
    assert "plugin `modinfo`: field `modinfo." in no_value.stderr
    assert "needs the Python GuardFilterEntry" in no_value.stderr


def test_cli_plugin_option_before_several_files():
    """Each --plugin takes one path (CLI11 once took every later word as another plugin)."""
    plugins = [arg for name in gp.EXAMPLE_PLUGINS for arg in ("--plugin", gp.example_plugin_path(name))]
    proc = run_cli("lint", *plugins, MODULE_KINDS, SHALLOW_GUARDS)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_cli_documented_usage_one_plugin_one_file():
    """`lint --plugin PATH FILE` (docs/cli.md, the example headers) works as written."""
    for path, plugin in ((MODULE_KINDS, "modinfo"), (SHALLOW_GUARDS, "names")):
        proc = run_cli("lint", "--plugin", gp.example_plugin_path(plugin), path)
        assert (proc.returncode, proc.stderr) == (0, ""), path
    # Several files, before the options too.
    both = run_cli("lint", MODULE_KINDS, SHALLOW_GUARDS, "--plugin", gp.example_plugin_path("modinfo"),
                   "--plugin", gp.example_plugin_path("names"))
    assert (both.returncode, both.stderr) == (0, "")


def test_filter_calls_may_leave_out_defaulted_parameters(example_plugins):
    """`names.drop_deep()` is `names.drop_deep(4)` (its declared default); too many
    arguments is GP2017 naming the accepted count."""
    rows = [{"name": "a.b.c.d"}, {"name": "a.b.c.d.e"}, {"name": "a.b.c.d.e.f"}]
    short = gp.load("guardpolicy 1\nunsafe policy p { drop when names.drop_deep() }\n")
    full = gp.load("guardpolicy 1\nunsafe policy p { drop when names.drop_deep(4) }\n")
    assert short.evaluate(rows) == full.evaluate(rows) == [True, True, False]
    d = lint_one("guardpolicy 1\nunsafe policy p { drop when names.drop_deep(1, 2) }\n")
    assert (d.code, d.message) == ("GP2017", "`names.drop_deep` takes 0 to 1 arguments, 2 given")


def test_plugin_paths_are_files_and_nul_bytes_are_refused(tmp_path):
    """A bare file name is a file in the working directory (never the dynamic linker's
    library search: `libz.so.1` must not open the system's zlib); NUL bytes are refused."""
    proc = run_cli("filters", "--plugin", "good.so", cwd=BAD_PLUGIN_DIR)
    assert proc.returncode == 0, proc.stderr
    assert "good.drop_all" in proc.stdout
    proc = run_cli("filters", "--plugin", "libz.so.1", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("guardpolicy: error: ./libz.so.1: cannot load the plugin: ./libz.so.1: cannot open")
    with pytest.raises(ValueError, match="embedded null byte"):
        gp.load_plugin("./a\x00b.so")
    with pytest.raises(ValueError, match="embedded null byte"):
        gp.load_plugin(gp.example_plugin_path("names"), config="strict\x00junk")


TEST_BLOCKS = """guardpolicy 1
unsafe policy p {
  keep when guard_type == SHAPE_ENV
  drop when modinfo.class_name == "Dropout"
}
test p {
  expect keep { guard_type: "SHAPE_ENV" }
  expect drop { guard_type: "ID_MATCH", modinfo.class_name: "Dropout" }
  expect keep { guard_type: "ID_MATCH" }
}
"""


def test_test_blocks_read_plugin_fields_only_when_needed(tmp_path):
    """An expectation decided before a plugin field is read passes without it; one that
    needs a field its plugin cannot give without a Python entry fails on its own line."""
    policy = tmp_path / "p.gpol"
    policy.write_text(TEST_BLOCKS)
    proc = run_cli("test", policy, "--plugin", gp.example_plugin_path("modinfo"))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{policy}:7:3: PASS: policy `p` keep"
    assert lines[1] == f"{policy}:8:3: PASS: policy `p` drop"
    assert lines[2].startswith(f"{policy}:9:3: FAIL: policy `p` could not decide: {gp.example_plugin_path('modinfo')}: "
                               "plugin `modinfo`: field `modinfo.class_name`: needs the Python GuardFilterEntry")
    assert lines[3] == "2 passed, 1 failed"


def test_evaluate_extracts_plugin_fields_a_row_does_not_give():
    """Policy.evaluate runs a plugin field's extractor on the row's core fields, like a
    `test` block; a value given in the row wins."""
    out = run_python(
        """
        import json, sys
        import guardpolicy as gp
        gp.load_plugin(sys.argv[1])
        policy = gp.load("guardpolicy 1\\nunsafe policy p { drop when good.flag }\\n")
        print(json.dumps([policy.evaluate([{}]), policy.evaluate([{"good.flag": False}])]))
        """,
        bad_plugin("good"),
    )
    assert out == [[False], [True]]
