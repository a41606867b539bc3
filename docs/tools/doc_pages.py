"""Page parsing for the docs test (docs_test.py): a Markdown page's fenced code blocks, each
with its language, its text and the ``<!-- docs-test: ... -->`` directives above it, and the
problems that belong to no block (stray annotations, an unclosed fence). docs_test.py's
docstring describes the conventions."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DIRECTIVES = {"skip", "expect", "fragment", "load", "plugin"}

_FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_FILE_LINE = re.compile(r"^#\s*file:\s*(?P<name>\S+)\s*$")
_CODE = re.compile(r"^GP\d{4}$")


# --------------------------------------------------------------------------- blocks


@dataclasses.dataclass
class Block:
    """One fenced code block of a Markdown page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str  # the content, each line ending in "\n"
    directives: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)  # bad annotations

    @property
    def where(self) -> str:
        try:
            rel = self.page.resolve().relative_to(ROOT)
        except ValueError:
            rel = self.page
        return f"{rel}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """NAME from a first line ``# file: NAME`` (gpol and python blocks)."""
        first = self.text.split("\n", 1)[0]
        m = _FILE_LINE.match(first)
        return m.group("name") if m else None

    @property
    def expected_codes(self) -> set[str]:
        return set(self.directives.get("expect", "").split())


def _parse_annotation(body: str, line: int) -> tuple[dict[str, str], list[str]]:
    directives: dict[str, str] = {}
    problems = []
    parts = [p.strip() for p in body.split(";")]
    for n, part in enumerate(parts):
        if part.split(" ", 1)[0] == "skip":  # the reason is the rest, `;` included
            parts[n:] = ["; ".join(parts[n:])]
            break
    for part in filter(None, parts):
        if part.startswith("plugin="):
            name, args = "plugin", part[len("plugin="):].strip()
        else:
            name, _, args = part.partition(" ")
            args = args.strip()
        if name not in DIRECTIVES:
            known = ", ".join(sorted(DIRECTIVES))
            problems.append(f"line {line}: unknown docs-test directive `{name}` (known: {known})")
            continue
        if name == "skip" and not args:
            problems.append(f"line {line}: `skip` needs a reason")
        if name == "expect" and (not args or not all(_CODE.match(c) for c in args.split())):
            problems.append(f"line {line}: `expect` takes diagnostic codes (GP1234 ...), not {args!r}")
        if name == "fragment" and args:
            problems.append(f"line {line}: `fragment` takes no argument")
        if name == "plugin" and not args:
            problems.append(f"line {line}: `plugin=NAME` needs a name")
        if name in directives and name != "plugin":
            problems.append(f"line {line}: `{name}` given twice")
        directives[name] = f"{directives[name]} {args}".strip() if name in directives else args
    return directives, problems


def parse_page(page: Path) -> tuple[list[Block], list[str]]:
    """The page's fenced blocks, and problems that belong to no block (stray annotations,
    an unclosed fence)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    page_problems: list[str] = []
    pending: list[tuple[int, str]] = []  # annotations waiting for their fence
    i = 0
    while i < len(lines):
        line = lines[i]
        m_ann = _ANNOTATION.match(line)
        if m_ann:
            pending.append((i + 1, m_ann.group("body")))
            i += 1
            continue
        if re.match(r"^\s*<!--.*docs-test", line):
            page_problems.append(f"{page}:{i + 1}: malformed annotation (write `<!-- docs-test: DIRECTIVE -->`)")
        m = _FENCE_OPEN.match(line)
        if not m:
            if pending:
                page_problems.append(f"{page}:{pending[0][0]}: docs-test annotation not directly above a fence")
                pending = []
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        info = m.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            text = lines[j]
            # CommonMark: the opening fence's indentation is removed from content lines.
            strip = min(indent, len(text) - len(text.lstrip(" ")))
            body.append(text[strip:])
            j += 1
        if j >= len(lines):
            page_problems.append(f"{page}:{i + 1}: fence never closed")
        block = Block(page=page, line=i + 1, lang=lang, text="".join(b + "\n" for b in body))
        for ann_line, ann_body in pending:
            directives, problems = _parse_annotation(ann_body, ann_line)
            for k, v in directives.items():
                block.directives[k] = f"{block.directives[k]} {v}".strip() if k in block.directives else v
            block.problems += problems
        pending = []
        blocks.append(block)
        i = j + 1
    if pending:
        page_problems.append(f"{page}:{pending[0][0]}: docs-test annotation not directly above a fence")
    return blocks, page_problems


def default_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
