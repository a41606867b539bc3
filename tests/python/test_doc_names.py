"""Guard names in the docs and the shipped policies are ones torch 2.13 produces (and the
shipped policies' ones every supported build too): the checker of docs/tools/doc_names.py
(used by `make docs-test`) against the committed snapshots of docs/snapshots/ (and
docs/snapshots/<build>/), and the running build's snapshots against a fresh capture."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "tools"))
import doc_names  # noqa: E402

POLICY_FILES = sorted((ROOT / "policies" / "examples").glob("*.gpol")) + sorted((ROOT / "policies" / "std").glob("*.gpol"))


#: The builds CI tests (Makefile PY_LEGS and the main venv), torch 2.12 on Python 3.12 (a leg run
#: locally: `make test-python-leg PYVER=3.12 TORCH=2.12.1`), torch 2.15 on Python 3.11 (the
#: README's `make test-python-leg PYVER=3.11 TORCH=2.15.0`) and on 3.12 (a leg until torch 2.11
#: took its place), each with committed snapshots.
BUILDS = [doc_names.DOCS_BUILD, "torch2.11-py3.12", "torch2.12-py3.12", "torch2.14-py3.11", "torch2.15-py3.11",
          "torch2.15-py3.12", "torch2.15-py3.13"]


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.name)
def test_shipped_policies_name_real_guards(path, build):
    claims = doc_names.gpol_claims(path.read_text(encoding="utf-8"))
    assert doc_names.unmatched(claims, build=build) == []


def test_snapshots_differ_by_build():
    """Why there is one folder per build: torch 2.14 guards GPT-2's `torch.Tensor` global
    with CLASS_MATCH where 2.13 has DUPLICATE_INPUT (so one build's snapshot would call the
    other's names stale)."""
    def kinds(build):
        return {r["guard_type"] for r in doc_names.snapshot_rows(build) if r["name"] == "G['__import_torch'].Tensor"}
    assert kinds(doc_names.DOCS_BUILD) == {"DUPLICATE_INPUT"}
    assert kinds("torch2.14-py3.11") == {"CLASS_MATCH"}


def test_the_serving_example_names_a_real_parameter():
    text = (ROOT / "policies" / "examples" / "serving.gpol").read_text(encoding="utf-8")
    conds = [c for _, c in doc_names.gpol_claims(text)]
    assert "name == \"self._modules['fc1']._parameters['weight']\" and guard_type == TENSOR_MATCH" in conds


def test_invented_names_are_reported():
    text = '''guardpolicy 1
unsafe policy p {
  drop when name == "self.fc.weight"
  drop when name startswith "self.layers"
  keep when path in {"blocks.0.0.weight", "blocks.0.weight"}
  keep when name == "x"
  default keep
}
test p {
  expect drop { guard_type: "TENSOR_MATCH", name: "self._modules['head']._parameters['weight']" }
  expect drop { guard_type: "CONSTANT_MATCH", name: "self._modules['head']._parameters['weight']" }
}
'''
    bad = doc_names.unmatched(doc_names.gpol_claims(text))
    assert [b.split(":", 1)[0] for b in bad] == ["line 3", "line 4", "line 5", "line 11"]
    assert "blocks.0.weight" in bad[2] and "CONSTANT_MATCH" in bad[3]


def test_python_dict_rows_are_checked():
    code = '''rows = [{"name": "x", "guard_type": "TENSOR_MATCH"}, {"name": "self.fc.weight"},
        {"path": "head.weight", "guard_type": "TENSOR_MATCH"}]\n'''
    claims = doc_names.python_claims(code)
    assert len(claims) == 3
    bad = doc_names.unmatched(claims)
    assert len(bad) == 1 and "self.fc.weight" in bad[0]


def test_committed_snapshots_are_current():
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "tools" / "capture_snapshots.py"), "--check"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_exported_name_is_in_the_python_apis_table():
    import re

    import guardpolicy as gp

    text = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in text.splitlines() if line.startswith("| "))
    assert [n for n in gp.__all__ if not re.search(r"`" + re.escape(n) + r"`", table)] == []
