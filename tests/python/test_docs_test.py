"""docs/tools/docs_test.py (``make docs-test``) holds the docs to their conventions: each
kind of wrong example fails with its file:line, and right ones pass."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = "```"


@pytest.fixture(scope="module")
def docs_test():
    spec = importlib.util.spec_from_file_location("docs_test", ROOT / "docs" / "tools" / "docs_test.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_test"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def doc_checks(docs_test):
    import doc_checks  # the per-language checks, beside docs_test.py (on sys.path once it is loaded)

    return doc_checks


def run(docs_test, tmp_path, capsys, body: str) -> tuple[int, str]:
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(body).replace("'''", FENCE))
    rc = docs_test.main([str(page), "-j", "1"])
    return rc, capsys.readouterr().out


GOOD = """\
    # A page

    '''gpol
    # file: a.gpol
    guardpolicy 1

    policy a { default keep }

    test a {
      expect keep { guard_type: "ID_MATCH" }
    }
    '''

    <!-- docs-test: expect GP2001 -->
    '''gpol
    guardpolicy 1
    unsafe policy p { drop when nmae == "x" }
    '''

    <!-- docs-test: fragment -->
    '''gpol
    keep when guard_type == SHAPE_ENV
    drop when is_global
    '''

    <!-- docs-test: expect GP3008 GP3009 GP4001; load policy=nope -->
    '''gpol
    guardpolicy 1
    unsafe policy p { default drop }
    '''

    '''console
    $ guardpolicy test a.gpol
    ...
    1 passed, 0 failed
    $ guardpolicy lint missing.gpol
    ...
    $ echo $?
    2
    $ echo one \\
    >/dev/null; echo two
    two
    '''

    '''python
    import guardpolicy as gp
    assert gp.load("a.gpol").name == "a"
    '''

    '''python
    # file: hello.py
    import sys
    print("hello", sys.argv[1])
    '''

    '''console
    $ python hello.py there
    hello there
    '''

    '''sh
    make everything   # a listing: not run
    '''

    <!-- docs-test: skip needs a GPU; really -->
    '''python
    raise SystemExit(1)
    '''

    '''text
    anything
    '''
"""


def test_a_page_that_keeps_the_conventions_passes(docs_test, tmp_path, capsys):
    rc, out = run(docs_test, tmp_path, capsys, GOOD)
    assert rc == 0, out
    assert "FAIL" not in out
    assert "SKIP  " in out and "needs a GPU; really" in out
    assert "lints clean, its tests pass" in out
    assert "saved as hello.py for the page's commands (compiles)" in out


@pytest.mark.parametrize("body, message", [
    ("'''\nplain\n'''\n", "fence without a language"),
    ("'''rust\nfn main() {}\n'''\n", "unknown language `rust`"),
    ("'''gpol\nguardpolicy 1\nunsafe policy p { drop when nmae == 1 }\n'''\n", "expected no diagnostic, got GP2001"),
    ("<!-- docs-test: expect GP2002 -->\n'''gpol\nguardpolicy 1\nunsafe policy p { drop when nmae == 1 }\n'''\n",
     "expected GP2002, got GP2001"),
    ("<!-- docs-test: fragment -->\n'''gpol\ndrop when nmae == 1\n'''\n", "unexpected errors GP2001"),
    ("'''console\n$ echo hi\nho\n'''\n", "output of `echo hi` differs"),
    ("'''console\n$ false\n'''\n", "`false` exited 1"),
    ("'''console\nhi\n$ echo hi\n'''\n", "output before the first"),
    ("'''sh\n$ echo hi\n'''\n", "output of `echo hi` differs"),
    ("'''python\nraise SystemExit(3)\n'''\n", "exited 3"),
    ("<!-- docs-test: skip -->\n'''python\npass\n'''\n", "`skip` needs a reason"),
    ("<!-- docs-test: frobnicate -->\n'''python\npass\n'''\n", "unknown docs-test directive `frobnicate`"),
    ("<!-- docs-test: expect GP2001 -->\n'''python\npass\n'''\n", "does not apply to python blocks"),
    ("<!-- docs-test: expect GP2001 -->\n\n'''gpol\nguardpolicy 1\n'''\n", "not directly above a fence"),
    ("<!-- docs-test: plugin=no_such_plugin -->\n'''gpol\nguardpolicy 1\n'''\n", "plugin=no_such_plugin: none of"),
    ("<!-- docs-test: plugin=no_such_plugin -->\n'''console\n$ true\n'''\n", "plugin=no_such_plugin: none of"),
    ("'''gpol\n# file: x.gpol\nguardpolicy 1\n'''\n\n'''gpol\n# file: x.gpol\nguardpolicy 1\n\n'''\n",
     "differs from the block at"),
    ("'''gpol\nguardpolicy 1\nunsafe policy p {\n  keep when name == \"self._modules['fc9']._parameters['weight']\"\n"
     "  drop when guard_type == CONSTANT_MATCH and is_global\n"
     "  default keep\n}\n'''\n", "names no compile produced"),
    ("'''gpol\nguardpolicy 1\npolicy p { default keep }\ntest p {\n  expect keep { name: \"self.fc.weight\" }\n}\n'''\n",
     "page.md:3  gpol  names no compile produced\n      line 7: `name == \"self.fc.weight\"` matches no guard"),
    ("'''python\nrows = [{\"name\": \"self.fc.weight\", \"guard_type\": \"TENSOR_MATCH\"}]\n'''\n",
     "names no compile produced"),
    ("'''python\n# file: broken.py\ndef f(:\n'''\n", "does not compile"),
    ("'''python\n# file: run_me.py\nraise SystemExit(4)\n'''\n\n'''console\n$ python run_me.py\n'''\n",
     "`python run_me.py` exited 4"),
    ("'''c\nint f(void) { return 1 }\n'''\n", "cc failed"),
    ("'''c\nint f(void) { return 1; }\n'''\n", "the plugin does not load"),
])
def test_a_broken_example_fails_with_its_line(docs_test, tmp_path, capsys, body, message):
    rc, out = run(docs_test, tmp_path, capsys, "# A page\n\n" + body)
    assert rc == 1, out
    assert message in out, out
    assert "page.md:" in out


def test_output_wildcard(doc_checks):
    match = doc_checks.output_matches
    assert match(["a", "...", "d"], ["a", "b", "c", "d"])
    assert match(["a", "...", "d"], ["a", "d"])
    assert match(["..."], [])
    assert not match(["a", "...", "d"], ["a", "b"])
    assert not match(["a"], ["a", "b"])


def test_fragments_are_wrapped(doc_checks):
    assert doc_checks.wrap_fragment("keep when is_global\n").startswith("guardpolicy 1\n\nunsafe policy fragment {")
    assert doc_checks.wrap_fragment("policy q { }\n") == "guardpolicy 1\n\npolicy q { }\n"
    assert doc_checks.wrap_fragment("guardpolicy 1\n") == "guardpolicy 1\n"
