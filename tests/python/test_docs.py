"""Generated docs stay in sync with their sources."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_diagnostics_reference_is_up_to_date():
    r = subprocess.run([sys.executable, str(ROOT / "docs/tools/gen_diagnostics.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_code_is_documented_with_meaning_and_fix():
    codes = set(re.findall(r'"(GP\d{4})"', (ROOT / "core/include/guardpolicy/diag_codes.h").read_text()))
    doc = (ROOT / "docs/diagnostics.md").read_text()
    documented = set(re.findall(r"^## (GP\d{4})$", doc, re.M))
    assert codes == documented
    assert "(undocumented)" not in doc
    assert doc.count("**Fix:**") == len(codes)


def test_schema_reference_is_up_to_date():
    r = subprocess.run([sys.executable, str(ROOT / "docs/tools/gen_schema.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
