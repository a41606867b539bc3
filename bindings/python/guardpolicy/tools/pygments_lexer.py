"""A Pygments lexer for guardpolicy ``.gpol`` files.

Registered as the ``pygments.lexers`` entry point ``gpol`` (pyproject.toml), so once the
package is installed ``pygmentize -l gpol file.gpol``, Sphinx/MkDocs code blocks tagged
``gpol`` and ``pygments.lexers.get_lexer_by_name("gpol")`` find it. Pygments is an optional
dependency: ``import guardpolicy`` never imports this module.

The token rules follow the lexer section of ``grammar/GuardPolicy.g4`` exactly: the same
keywords (a keyword followed by an identifier character is an identifier, as ANTLR's
longest match has it), operators, ``[a-zA-Z_][a-zA-Z_0-9]*`` identifiers, decimal integers,
double-quoted strings with any backslash escape (the checker, not the lexer, rejects escapes
other than ``\\\\ \\" \\n \\t \\r``: GP1003), ``#`` comments and ``[ \\t\\r\\n]`` whitespace.
Every other character is the grammar's ``ERROR_CHAR`` and lexes as ``Error``.

Highlighting refinements that do not change what is a token: the name after ``policy``,
``test`` and ``use`` is ``Name.Class``; an identifier after ``.`` is ``Name.Attribute``; an
identifier followed by ``(`` in a condition (a call ``ns.fn(args)``) is ``Name.Function``;
an all-capitals identifier (``TENSOR_MATCH``, ``LOCAL``) is ``Name.Constant``.
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, default, include, words
from pygments.token import (
    Comment,
    Error,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Whitespace,
)

from .. import _core

__all__ = ["GuardPolicyLexer"]

_IDENT = r"[a-zA-Z_][a-zA-Z_0-9]*"
_END = r"(?![a-zA-Z_0-9])"  # a keyword ends where an identifier could not go on
_WS = r"[ \t\r\n]+"  # the grammar's WS: no other whitespace character is skipped

#: Every keyword of grammar/GuardPolicy.g4, read from the lexer ANTLR generates from it
#: (``guardpolicy._core.keywords()``): the grammar is the only list.
KEYWORDS = tuple(_core.keywords())

#: Keywords highlighted apart from the others, by role; every other keyword is an item
#: keyword (``keep``, ``when``, ``config``, ...), so a keyword added to the grammar is
#: highlighted as one without a change here.
HEADER_KEYWORDS = ("guardpolicy",)
DECLARATION_KEYWORDS = ("policy", "test")
MODIFIER_KEYWORDS = ("unsafe",)
USE_KEYWORDS = ("use",)
WORD_OPERATORS = ("and", "or", "not", "in", "contains", "startswith", "endswith", "matches", "glob")
CONSTANT_KEYWORDS = ("true", "false")
_ROLES = HEADER_KEYWORDS + DECLARATION_KEYWORDS + MODIFIER_KEYWORDS + USE_KEYWORDS + WORD_OPERATORS + CONSTANT_KEYWORDS
if not set(_ROLES) <= set(KEYWORDS):
    raise ImportError(f"guardpolicy.tools.pygments_lexer: not keywords of the grammar: {sorted(set(_ROLES) - set(KEYWORDS))}")
ITEM_KEYWORDS = tuple(k for k in KEYWORDS if k not in _ROLES)


class GuardPolicyLexer(RegexLexer):
    """Lexer for guardpolicy guard-filter policy files (``.gpol``)."""

    name = "GuardPolicy"
    aliases = ["gpol", "guardpolicy"]
    filenames = ["*.gpol"]
    mimetypes = ["text/x-guardpolicy"]

    tokens = {
        # Whitespace and comments, allowed between any two tokens.
        "ws": [
            (_WS, Whitespace),
            (r"#[^\r\n]*", Comment.Single),
        ],
        "root": [
            # "guardpolicy 1": the version header.
            (r"(guardpolicy)" + _END, Keyword.Namespace),
            # `policy NAME`, `test NAME`: the declared (or tested) policy's name.
            (words(DECLARATION_KEYWORDS, suffix=_END), Keyword.Declaration, "declname"),
            (words(MODIFIER_KEYWORDS, suffix=_END), Keyword.Declaration),
            # `use a.b(...)`: the used policy's (qualified) name, then its arguments.
            (r"(use)" + _END, Keyword.Namespace, "usename"),
            (words(ITEM_KEYWORDS, suffix=_END), Keyword),
            (words(WORD_OPERATORS, suffix=_END), Operator.Word),
            (words(CONSTANT_KEYWORDS, suffix=_END), Keyword.Constant),
            (r'"(?=(?:\\[\s\S]|[^"\\\r\n])*")', String.Double, "string"),
            (r"==|!=|<=|>=|<|>|=|-", Operator),
            (r"[(){},:.]", Punctuation),
            (r"[0-9]+", Number.Integer),
            # A call `ns.fn(args)`: the (last) identifier before `(`.
            (_IDENT + r"(?=[ \t\r\n]*\()", Name.Function),
            # The parts after the first of a dotted path: `value.is_parameter`.
            (r"(?<=\.)" + _IDENT, Name.Attribute),
            (r"[A-Z][A-Z0-9_]*" + _END, Name.Constant),
            (_IDENT, Name),
            include("ws"),
            # ERROR_CHAR: any other character (a `"` that starts no complete string too).
            (r"[\s\S]", Error),
        ],
        "declname": [
            include("ws"),
            (_IDENT, Name.Class, "#pop"),
            default("#pop"),
        ],
        "usename": [
            include("ws"),
            (_IDENT, Name.Class, ("#pop", "usename_rest")),
            default("#pop"),
        ],
        "usename_rest": [
            (r"(" + _WS + r")?(\.)(" + _WS + r")?(" + _IDENT + r")",
             bygroups(Whitespace, Punctuation, Whitespace, Name.Class)),
            default("#pop"),
        ],
        "string": [
            (r"\\[\s\S]", String.Escape),
            (r'[^"\\\r\n]+', String.Double),
            (r'"', String.Double, "#pop"),
        ],
    }

    def analyse_text(text: str) -> float:  # noqa: N805 - Pygments calls it without self
        """A file that starts (after comments and blank lines) with the header."""
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            return 0.9 if stripped.split() and stripped.split()[0] == "guardpolicy" else 0.0
        return 0.0
