"""The ``code`` field of one ``GuardFilterEntry``: what the guard checks, as torch wrote it."""

from __future__ import annotations

from typing import Any


def guard_code(entry: Any) -> str:
    """The guard's check code, as the C++ extractor reads the schema field ``code``
    (``EntryExtractor::Code``): ``entry.code_parts`` where torch has it (2.15), else
    ``entry.orig_guard.code_list`` as it stands now, which is right only while
    ``guard_filter_fn`` runs (torch 2.14 resets it when it rebuilds the kept guards); each
    part once, in torch's order, joined by newlines, e.g. ``"L['self'].n_active == 3"``.
    "" for a guard with no Python check code (GRAD_MODE, SHAPE_ENV, ...)."""
    parts = getattr(entry, "code_parts", _ABSENT)  # present but None: no code (as the extractor reads it)
    if parts is _ABSENT:
        parts = getattr(getattr(entry, "orig_guard", None), "code_list", None)
    code = ""
    for text in dict.fromkeys(str(p) for p in parts or ()):
        code += ("\n" if code else "") + text
    return code


_ABSENT = object()
