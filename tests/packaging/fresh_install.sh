#!/usr/bin/env bash
# A plain `pip install .` of this checkout into a new virtual environment (build isolation,
# a fresh build directory), then, with that environment only:
#   - `guardpolicy` is the C++ executable (not a Python console script), reads the schema and
#     std policies installed beside it (<venv>/share/guardpolicy, the same bytes as the
#     package's data) and never the checkout's; `guardpolicy lint policies/std/*.gpol` exits
#     0; `guardpolicy capture` points at `python -m guardpolicy`, whose --help works;
#   - the README's examples run (docs/tools/docs_test.py README.md);
#   - the wheel carries the std and example policies, the schema, the example plugins, the
#     .pyi stubs and the Pygments lexer entry point;
#   - `python -m guardpolicy demo` runs from a directory that is not the checkout.
# torch is large, so the new environment sees the project environment's torch through a
# .pth file appended after its own site-packages (its own guardpolicy comes first).
#   tests/packaging/fresh_install.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${1:-$root/.venv/bin/python}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gp-fresh-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== new virtual environment"
"$python" -m venv "$tmp/venv"
venv_py="$tmp/venv/bin/python"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib "$python" >"$(purelib "$venv_py")/zz_project_torch.pth"

echo "== pip install $root"
"$venv_py" -m pip install -q --disable-pip-version-check "$root" >"$tmp/pip.log" 2>&1 || { tail -n 40 "$tmp/pip.log"; exit 1; }

echo "== the installed package"
cd "$tmp"
FRESH_VENV="$tmp/venv" "$venv_py" - <<'PY'
import importlib.metadata as md, os, guardpolicy as gp
here = os.path.dirname(gp.__file__)
assert here.startswith(os.environ["FRESH_VENV"] + "/"), f"imported another guardpolicy: {here}"
for name in gp.EXAMPLE_PLUGINS:
    assert os.path.isfile(gp.example_plugin_path(name)), name
for f in ["_core.pyi", "py.typed", "data/schema/guard_entry.yaml", "data/std/skip_all_guards.gpol",
          "data/examples/serving.gpol"]:
    assert os.path.isfile(os.path.join(here, f)), f
eps = [e.value for e in md.entry_points(group="pygments.lexers") if e.name == "gpol"]
assert eps == ["guardpolicy.tools.pygments_lexer:GuardPolicyLexer"], eps
print("package ok:", here)
PY

echo "== the guardpolicy command"
exe="$tmp/venv/bin/guardpolicy"
[ "$(head -c 4 "$exe" | od -An -c | tr -d ' ')" = '177ELF' ] || { echo "$exe is not an ELF executable"; exit 1; }
pkg_data=$("$venv_py" -c 'import guardpolicy as gp; print(gp.DATA_DIR)')
diff -r "$pkg_data" "$tmp/venv/share/guardpolicy"
"$exe" lint "$root"/policies/std/*.gpol
# Without its installed data the command fails, naming them: it never falls back to the checkout.
mv "$tmp/venv/share/guardpolicy" "$tmp/share.moved"
if "$exe" lint "$root"/policies/std/skip_all_guards.gpol 2>"$tmp/err.txt"; then
  echo "the installed guardpolicy ran without its data (read the checkout?)"; exit 1
fi
grep -qF "$tmp/venv/share/guardpolicy/schema/guard_entry.yaml" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
mv "$tmp/share.moved" "$tmp/venv/share/guardpolicy"
if "$exe" capture x.py -o x.json 2>"$tmp/err.txt"; then echo "guardpolicy capture ran"; exit 1; fi
grep -qF 'run `python -m guardpolicy capture`' "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
"$venv_py" -m guardpolicy --help >/dev/null
"$venv_py" -m guardpolicy capture --help >/dev/null

echo "== a Python tool from a directory that is not the checkout"
# The demo reads nothing relative to the working directory and writes nothing there
# (a few calls: this checks that it runs, not what it measures).
mkdir "$tmp/elsewhere"
(cd "$tmp/elsewhere" && "$venv_py" -m guardpolicy demo --models mlp --backends eager --calls 4 \
  --block 2 >"$tmp/demo.txt" 2>"$tmp/demo.err") || { tail -n 20 "$tmp/demo.err"; exit 1; }
grep -q "suggest --model my.py -o my.gpol" "$tmp/demo.txt" || { cat "$tmp/demo.txt"; exit 1; }

echo "== the README's examples"
"$venv_py" "$root/docs/tools/docs_test.py" "$root/README.md"
echo "fresh install: ok"
