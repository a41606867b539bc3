"""The Pygments lexer for .gpol (guardpolicy/tools/pygments_lexer.py) and its entry point.

Pygments is a test dependency (pyproject's ``test`` extra, the Makefile's PIP_PACKAGES): the
import below fails the suite when it is missing rather than skipping it.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pygments  # noqa: F401 - a missing pygments must fail, not skip
import pytest
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.token import Comment, Error, Keyword, Name, Number, Operator, Punctuation, String, Whitespace

from guardpolicy.tools.pygments_lexer import KEYWORDS, GuardPolicyLexer

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
ENTRY_POINT = "guardpolicy.tools.pygments_lexer:GuardPolicyLexer"

#: Corpus files whose text holds characters outside the grammar's tokens (ERROR_CHAR).
LEXICALLY_BAD = {
    "reject/GP1001_stray_character.gpol",  # a `$` between two operands
    "reject/GP0004_fuzz_invalid_lead_byte.gpol",  # bytes that are not UTF-8 (decoded as U+FFFD)
    "reject/GP0006_unknown_artifact_version.gpol",  # a .gpolc header: NUL bytes
    "reject/GP1001_c_style_and.gpol",  # `&&`
    "reject/GP1001_control_character.gpol",  # a BEL
    "reject/GP1001_no_break_space.gpol",  # U+00A0
    "reject/GP1001_single_quoted_string.gpol",  # 'self.fc'
    "reject/GP1001_unterminated_string.gpol",  # a `"` with no end on its line
}


def _doc_pages():
    """The docs test's page parsing (docs/tools/doc_pages.py)."""
    sys.path.insert(0, str(ROOT / "docs" / "tools"))
    import doc_pages

    return doc_pages


def _read(path: Path) -> str:
    # The tools refuse non-UTF-8 input (GP0004) before lexing; a highlighter shows it replaced.
    return path.read_bytes().decode("utf-8", "replace")


def _tokens(text: str) -> list[tuple]:
    return list(GuardPolicyLexer(stripnl=False).get_tokens(text))


def _errors(text: str) -> list[str]:
    return [value for token, value in _tokens(text) if token in Error]


def _significant(text: str) -> list[tuple]:
    return [(t, v) for t, v in _tokens(text) if t not in Whitespace]


CORPUS_FILES = sorted(p for p in CORPUS.glob("*/*.gpol") if p.is_file())
POLICY_FILES = sorted((ROOT / "policies").rglob("*.gpol"))


def test_the_file_sets_are_not_empty():
    assert len(CORPUS_FILES) > 50 and len(POLICY_FILES) >= 9


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_file_lexes_with_errors_exactly_where_expected(path):
    text = _read(path)
    # nothing lost (pygments turns \r\n and \r into \n and ends the text with one)
    normalized = text.replace("\r\n", "\n").replace("\r", "\n")
    assert "".join(v for _, v in _tokens(text)).rstrip("\n") == normalized.rstrip("\n")
    rel = str(path.relative_to(CORPUS))
    assert bool(_errors(text)) == (rel in LEXICALLY_BAD), _errors(text)


def test_expected_error_files_exist():
    assert {str(p.relative_to(CORPUS)) for p in CORPUS_FILES} >= LEXICALLY_BAD


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_policy_file_lexes_without_errors(path):
    assert _errors(_read(path)) == []


def test_docs_gpol_blocks_lex_without_errors():
    """Every ```gpol block of README.md and docs/*.md; the reject examples that
    docs/diagnostics.md copies from the lexically bad corpus files are the exceptions."""
    doc_pages = _doc_pages()
    bad_texts = {_read(CORPUS / rel).rstrip("\n") for rel in LEXICALLY_BAD}
    seen = 0
    for page in doc_pages.default_pages():
        blocks, _ = doc_pages.parse_page(page)
        for block in blocks:
            if block.lang != "gpol":
                continue
            seen += 1
            errors = _errors(block.text)
            if block.text.rstrip("\n") in bad_texts:
                assert errors, block.where
            else:
                assert errors == [], f"{block.where}: {errors}"
    assert seen >= 10


# --------------------------------------------------------------------------- token types


def test_keywords_match_the_grammar():
    grammar = (ROOT / "grammar" / "GuardPolicy.g4").read_text()
    literal_tokens = set(re.findall(r"^[A-Z_]+\s*:\s*'([a-z_]+)'\s*;", grammar, re.M))
    assert set(KEYWORDS) == literal_tokens


SAMPLE = textwrap.dedent('''\
    guardpolicy 1
    # a comment
    unsafe policy p(flag: bool = false, n: int = -3) {
      doc "say \\"hi\\"\\n"
      keep when guard_type in {SHAPE_ENV, GLOBAL_STATE} and not value.is_parameter
      drop when name matches "^G\\\\[" or source.depth >= 2
      drop when ns.fn(name, 1) == true
      use std.keep_tensor_guards(keep_parameters = true)
      config install_free_tensors = true
      stance skip_guard_eval_unsafe after 8 calls
      on_error raise
      default keep
    }
    test p {
      expect drop { guard_type: "ID_MATCH", user_frame.line: 3 }
    }
    ''')


def test_token_types():
    toks = _significant(SAMPLE)
    assert _errors(SAMPLE) == []
    expect = [
        (Keyword.Namespace, "guardpolicy"), (Number.Integer, "1"), (Comment.Single, "# a comment"),
        (Keyword.Declaration, "unsafe"), (Keyword.Declaration, "policy"), (Name.Class, "p"),
        (Punctuation, "("), (Name, "flag"), (Punctuation, ":"), (Name, "bool"), (Operator, "="),
        (Keyword.Constant, "false"), (Punctuation, ","), (Name, "n"), (Punctuation, ":"), (Name, "int"),
        (Operator, "="), (Operator, "-"), (Number.Integer, "3"), (Punctuation, ")"), (Punctuation, "{"),
        (Keyword, "doc"), (String.Double, '"'), (String.Double, "say "), (String.Escape, '\\"'),
        (String.Double, "hi"), (String.Escape, '\\"'), (String.Escape, "\\n"), (String.Double, '"'),
        (Keyword, "keep"), (Keyword, "when"), (Name, "guard_type"), (Operator.Word, "in"), (Punctuation, "{"),
        (Name.Constant, "SHAPE_ENV"), (Punctuation, ","), (Name.Constant, "GLOBAL_STATE"), (Punctuation, "}"),
        (Operator.Word, "and"), (Operator.Word, "not"), (Name, "value"), (Punctuation, "."),
        (Name.Attribute, "is_parameter"),
    ]
    assert toks[:len(expect)] == expect
    pairs = set(toks)
    for pair in [
        (Operator.Word, "matches"), (Operator.Word, "or"), (Operator, ">="), (String.Escape, "\\\\"),
        (Name.Attribute, "depth"), (Name, "ns"), (Name.Function, "fn"), (Operator, "=="),
        (Keyword.Constant, "true"), (Keyword.Namespace, "use"), (Name.Class, "std"),
        (Name.Class, "keep_tensor_guards"), (Name, "keep_parameters"), (Keyword, "config"),
        (Keyword, "stance"), (Keyword, "after"), (Keyword, "calls"), (Keyword, "on_error"), (Name, "raise"),
        (Keyword, "default"), (Keyword.Declaration, "test"), (Keyword, "expect"), (Keyword, "drop"),
        (String.Double, "ID_MATCH"), (Name.Attribute, "line"),
    ]:
        assert pair in pairs, pair
    # the tested policy's name
    i = toks.index((Keyword.Declaration, "test"))
    assert toks[i + 1] == (Name.Class, "p")


@pytest.mark.parametrize("text, tokens", [
    # a keyword followed by identifier characters is an identifier (ANTLR's longest match)
    ("keepx policyy in_ notx", [(Name, "keepx"), (Name, "policyy"), (Name, "in_"), (Name, "notx")]),
    # an integer then an identifier, as INT and IDENT
    ("12ab", [(Number.Integer, "12"), (Name, "ab")]),
    # calls, dotted or not, with space before the parenthesis
    ("a.b.c (x)", [(Name, "a"), (Punctuation, "."), (Name.Attribute, "b"), (Punctuation, "."),
                   (Name.Function, "c"), (Punctuation, "("), (Name, "x"), (Punctuation, ")")]),
    ("f()", [(Name.Function, "f"), (Punctuation, "("), (Punctuation, ")")]),
    # operators, longest first
    ("<= < >= > == != = -", [(Operator, "<="), (Operator, "<"), (Operator, ">="), (Operator, ">"),
                             (Operator, "=="), (Operator, "!="), (Operator, "="), (Operator, "-")]),
    # any escape is lexically a string (the checker reports \q: GP1003)
    ('"a\\qb"', [(String.Double, '"'), (String.Double, "a"), (String.Escape, "\\q"), (String.Double, "b"),
                 (String.Double, '"')]),
    # a comment runs to the end of the line, `#` inside a string is not one
    ('"#x" # y "z"', [(String.Double, '"'), (String.Double, "#x"), (String.Double, '"'),
                      (Comment.Single, '# y "z"')]),
    # a policy's parameter list is not a call
    ("policy q(a: int)", [(Keyword.Declaration, "policy"), (Name.Class, "q"), (Punctuation, "("),
                          (Name, "a"), (Punctuation, ":"), (Name, "int"), (Punctuation, ")")]),
])
def test_small_inputs(text, tokens):
    assert _significant(text) == tokens


@pytest.mark.parametrize("text, bad", [
    ("a $ b", ["$"]),
    ('name == "open', ['"']),  # no closing quote on the line: ERROR_CHAR, then the rest lexes
    ("x\u00a0y", ["\u00a0"]),  # only [ \t\r\n] is whitespace
    ("caf\u00e9", ["\u00e9"]),  # identifiers are ASCII
    ("a ; b @ c", [";", "@"]),
])
def test_error_characters(text, bad):
    assert _errors(text) == bad


def test_unterminated_string_recovers():
    toks = _significant('drop when name == "open\ndefault keep\n')
    assert (Error, '"') in toks
    assert (Keyword, "default") in toks and (Keyword, "keep") in toks


def test_analyse_text():
    assert GuardPolicyLexer.analyse_text("# policy\n\nguardpolicy 1\n") > 0.5
    assert GuardPolicyLexer.analyse_text("import os\n") == 0.0


# --------------------------------------------------------------------------- packaging


def test_importing_guardpolicy_does_not_import_pygments():
    code = "import sys, guardpolicy, guardpolicy.cli; assert 'pygments' not in sys.modules, 'imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_pyproject_declares_the_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'[project.entry-points."pygments.lexers"]\ngpol = "{ENTRY_POINT}"\n' in text
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads(text)["project"]
        assert project["entry-points"]["pygments.lexers"] == {"gpol": ENTRY_POINT}
        assert "pygments" in project["optional-dependencies"]["test"]
        assert not any(d.startswith("pygments") for d in project.get("dependencies", []))


def test_entry_point_works_through_pygments_plugin_lookup(tmp_path):
    """The declared entry point, put in a made-up distribution's metadata, is what
    pygments' plugin lookup finds (independent of whether this checkout is installed)."""
    dist = tmp_path / "gpol_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gpol-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[pygments.lexers]\ngpol = {ENTRY_POINT}\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pygments.lexers import get_lexer_by_name; "
            "print(type(get_lexer_by_name('gpol')).__name__)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "GuardPolicyLexer", proc.stderr


def test_installed_package_registers_the_lexer():
    """The installed guardpolicy (make build) carries the entry point: pygments finds the
    lexer by alias and by file name."""
    points = [ep for ep in importlib.metadata.entry_points(group="pygments.lexers") if ep.name == "gpol"]
    assert [ep.value for ep in points] == [ENTRY_POINT], "reinstall guardpolicy (make build)"
    assert points[0].dist is not None and points[0].dist.name == "guardpolicy"
    assert isinstance(get_lexer_by_name("gpol"), GuardPolicyLexer)
    assert isinstance(get_lexer_by_name("guardpolicy"), GuardPolicyLexer)
    assert isinstance(get_lexer_for_filename("serving.gpol"), GuardPolicyLexer)
