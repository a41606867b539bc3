"""The schema YAML is the only list of fields, the grammar the only list of keywords: every
other list is generated from them (the binding's field table at build time, the capture
rows and the Pygments lexer from those), and these tests fail when one drifts."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import guardpolicy as gp
from guardpolicy import _core
from guardpolicy.tools import pygments_lexer
from guardpolicy.tools import capture

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "policies" / "schema" / "guard_entry.yaml"
GRAMMAR = ROOT / "grammar" / "GuardPolicy.g4"


def _schema_fields(path: Path) -> list[str]:
    return list(yaml.safe_load(path.read_text(encoding="utf-8"))["fields"])


def _grammar_keywords() -> list[str]:
    return re.findall(r"^[A-Z_]+\s*:\s*'([a-z_]+)'\s*;", GRAMMAR.read_text(encoding="utf-8"), re.M)


def test_the_binding_reads_exactly_the_schema_fields_in_order():
    assert _core.schema_fields() == _schema_fields(SCHEMA)
    assert _schema_fields(gp.DATA_DIR / "schema" / "guard_entry.yaml") == _schema_fields(SCHEMA)


def test_capture_rows_have_exactly_the_schema_fields():
    import torch

    assert capture.FIELDS == tuple(_schema_fields(SCHEMA))
    snap = capture.capture(lambda x: x + 1, torch.ones(2))
    assert snap.entry_count > 0
    assert all(tuple(row) == capture.FIELDS for row in snap.rows())


def test_every_schema_field_is_a_policy_field():
    """A policy that reads every field loads (the binding has an extractor for each)."""
    fields = _schema_fields(SCHEMA)
    conds = []
    for name, spec in yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))["fields"].items():
        t = spec["type"]
        conds.append(name if t == "bool" else f"{name} == 0" if t == "int" else
                     f'{name} == ""' if t == "string" else f"{name} contains TENSOR_MATCH" if t.startswith("set:")
                     else f"{name} == {'TENSOR_MATCH' if t.endswith('GuardType') else 'LOCAL'}")
    p = gp.load("guardpolicy 1\nunsafe policy p {\n" + "".join(f"  drop when {c}\n" for c in conds) + "}\n")
    assert sorted(p.fields) == sorted(fields)


def test_the_lexer_keywords_are_the_grammar_keywords():
    assert _core.keywords() == _grammar_keywords()
    assert pygments_lexer.KEYWORDS == tuple(_grammar_keywords())
    roles = (pygments_lexer.HEADER_KEYWORDS + pygments_lexer.DECLARATION_KEYWORDS + pygments_lexer.MODIFIER_KEYWORDS
             + pygments_lexer.USE_KEYWORDS + pygments_lexer.WORD_OPERATORS + pygments_lexer.CONSTANT_KEYWORDS
             + pygments_lexer.ITEM_KEYWORDS)
    assert sorted(roles) == sorted(_grammar_keywords())
