#!/usr/bin/env bash
# `make lint`: ruff on the Python package (pyproject.toml [tool.ruff]), clang-tidy (.clang-tidy)
# on the C++ sources of core/, tools/ and bindings/, and clang-format (.clang-format) on the C++
# lines this branch changes against BASE (default: the merge base with main). The tree predates
# .clang-format and is not mass-reformatted, so only changed lines are held to it.
#
#   .ci/lint.sh BUILD_DIR [RUFF]      BUILD_DIR holds compile_commands.json
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: .ci/lint.sh BUILD_DIR [RUFF]}
ruff=${2:-ruff}
status=0

echo "== ruff"
"$ruff" check bindings/python/guardpolicy || status=1

echo "== clang-format (lines changed since ${BASE:=$(git merge-base HEAD main 2>/dev/null || echo HEAD)})"
out=$(git clang-format --quiet --diff --extensions c,h,cpp "$BASE" -- core tools bindings plugins tests/cpp 2>&1 || true)
if [ -n "$out" ] && ! grep -qE "^(no modified files to format|clang-format did not modify any files)$" <<<"$out"; then
  echo "$out"
  echo "clang-format: the lines above differ from .clang-format (git clang-format $BASE fixes them)"
  status=1
fi

echo "== clang-tidy"
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json: build first"; exit 2; }
if ! git ls-files 'core/src/*.cpp' 'tools/*.cpp' 'bindings/*.cpp' |
    xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet 2> >(grep -v "warnings generated" >&2); then
  status=1
fi
exit $status
