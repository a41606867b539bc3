"""Issue 17, items 6-10 and 14 through the Python API: truncated artifacts, the artifact
checksum, globs as fnmatch reads them, CR-only line ends, long lines, parser hints."""

from __future__ import annotations

import fnmatch
import struct

import pytest

import guardpolicy as gp


def fnv1a_64(data: bytes) -> int:
    """FNV-1a 64 with the published parameters (draft-eastlake-fnv)."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_saved_artifact_header_is_format_5_with_the_published_fnv1a_checksum(tmp_path):
    path = tmp_path / "globals.gpolc"
    gp.load_std("skip_guard_on_globals").save(path)
    raw = path.read_bytes()
    magic, version, _schema_hash, size, checksum = struct.unpack("<8sIQQQ", raw[:36])
    assert magic == b"GPOLC\x00\r\n"
    assert version == 5
    assert size == len(raw) - 36
    assert checksum == fnv1a_64(raw[36:])


def test_an_older_artifact_says_to_recompile(tmp_path):
    path = tmp_path / "old.gpolc"
    gp.load_std("skip_guard_on_globals").save(path)
    raw = bytearray(path.read_bytes())
    raw[8] = 2
    path.write_bytes(bytes(raw))
    with pytest.raises(gp.PolicyError) as info:
        gp.load(path)
    assert [d.code for d in info.value.diagnostics] == ["GP0006"]
    assert "format version 2 is older than this guardpolicy's 5: recompile it" in str(info.value)


@pytest.mark.parametrize("data", [b"", b"G", b"GPOLC", b"GPOLC\x00\r"])
def test_a_gpolc_cut_inside_its_magic_is_a_refused_artifact(tmp_path, data):
    path = tmp_path / "cut.gpolc"
    path.write_bytes(data)
    with pytest.raises(gp.PolicyError) as info:
        gp.load(path)
    assert [d.code for d in info.value.diagnostics] == ["GP0006"]
    assert f"truncated: {len(data)} bytes" in str(info.value)


GLOBS = ["[]]", "[]abc]", "[!]]", "x[]-c]y", "[a-]", "[!a-c]", "*.[ch]", "?[]]?", "[", "[!", "[]",
         "[!]", "a[b", "[[]", "[*]", "[?]", "x*y?z", "[a-cx-z]", "*]", "[!!]", "\\*", "[\\]]",
         "G[[]'*'[]]", "self._modules[[]'*'[]]*"]
NAMES = ["", "]", "a", "b", "d", "-", "[", "!", "x", "ab", "abc", "a.c", "a.h", "]]", "x]y", "xby",
         "a[b", "[]", "[!]", "xyz", "x1y2z", "\\", "\\*", "\\]", "G['CONFIG']", "G['FLAGS']",
         "self._modules['fc']", "self._modules['fc'].weight", "x.size()[0]", "*", "?"]


@pytest.mark.parametrize("glob", GLOBS)
def test_glob_matches_as_fnmatch_does(glob):
    source = "guardpolicy 1\nunsafe policy p {\n  drop when name glob %s\n}\n" % (
        '"' + glob.replace("\\", "\\\\") + '"')
    policy = gp.load(source)
    kept = policy.evaluate([{"name": name} for name in NAMES])
    assert [not k for k in kept] == [fnmatch.fnmatchcase(name, glob) for name in NAMES]


def test_glob_errors_never_show_the_generated_regex():
    diags = gp.lint('guardpolicy 1\nunsafe policy p {\n  drop when name glob "[z-a]"\n}\n')
    assert [d.code for d in diags] == ["GP2009"]
    assert diags[0].message == "invalid glob pattern: the range `z-a` in `[z-a]` is reversed, so it matches nothing"


def test_carriage_return_line_ends_count_as_lines():
    diags = gp.lint('guardpolicy 1\runsafe policy p {\r  drop when is_global\r  drop when nmae == "x"\r}\r')
    assert [(d.code, d.line, d.column) for d in diags] == [("GP2001", 4, 13)]


def test_a_long_line_is_shown_around_the_caret():
    source = 'guardpolicy 1\npolicy p { keep when name == "%s" or nmae == "y" }\n' % ("x" * 500000)
    with pytest.raises(gp.PolicyError) as info:
        gp.load(source)
    text = str(info.value)
    assert len(text) < 600
    assert 'x" or nmae == "y" }' in text


def test_parser_says_strings_use_double_quotes():
    diags = gp.lint("guardpolicy 1\npolicy p {\n  keep when name == 'x'\n}\n")
    assert [(d.code, d.message, d.help) for d in diags] == [
        ("GP1001", "strings use double quotes, not `'`", 'write "x"')]


def test_lint_of_a_compiled_policy_says_what_it_is(tmp_path):
    path = tmp_path / "globals.gpolc"
    gp.load_std("skip_guard_on_globals").save(path)
    diags = gp.lint(path)
    assert [(d.code, d.message) for d in diags] == [
        ("GP0006", f"`{path}` is a compiled policy (.gpolc), not policy source")]
