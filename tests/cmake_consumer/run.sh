#!/usr/bin/env bash
# Installs a configured and built guardpolicy tree to a temporary prefix, then builds and
# runs tests/cmake_consumer against it with find_package(guardpolicy).
#   tests/cmake_consumer/run.sh BUILD_DIR
# The tree must have the install rules (GUARDPOLICY_INSTALL=ON; the default for a plain
# top-level configure). Uses the cmake on PATH and the tree's compilers and generator.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache="$build_dir/CMakeCache.txt"

cached() {  # the value of a CMakeCache.txt entry, or "" when absent
  sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n1
}
if [ "$(cached GUARDPOLICY_INSTALL)" != ON ]; then
  echo "run.sh: $build_dir was configured without GUARDPOLICY_INSTALL=ON" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gp-cmake-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

echo "== install $build_dir to $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }

echo "== configure and build the consumer"
args=(-S "$here" -B "$tmp/build" -G "$(cached CMAKE_GENERATOR)"
      -DCMAKE_PREFIX_PATH="$prefix"
      -DCMAKE_C_COMPILER="$(cached CMAKE_C_COMPILER)"
      -DCMAKE_CXX_COMPILER="$(cached CMAKE_CXX_COMPILER)")
make_program=$(cached CMAKE_MAKE_PROGRAM)
if [ -x "$make_program" ]; then args+=(-DCMAKE_MAKE_PROGRAM="$make_program"); fi
build_type=$(cached CMAKE_BUILD_TYPE)
if [ -n "$build_type" ]; then args+=(-DCMAKE_BUILD_TYPE="$build_type"); fi
cmake "${args[@]}" >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }

echo "== run the consumer"
"$tmp/build/consumer" | tee "$tmp/out.txt"
expected="data dir: $prefix/share/guardpolicy
decision SHAPE_ENV '': keep
decision EQUALS_MATCH 'G['GLOBAL_INT']': drop
decision TENSOR_MATCH 'self._modules['fc1']._parameters['weight']': drop
decision TENSOR_MATCH 'x': keep
plugin consumer 1.0.0: depth 1 -> keep
plugin consumer 1.0.0: depth 2 -> keep
plugin consumer 1.0.0: depth 3 -> drop
consumer: ok"
if [ "$(cat "$tmp/out.txt")" != "$expected" ]; then
  echo "run.sh: unexpected output; expected:" >&2
  echo "$expected" >&2
  exit 1
fi

echo "== run the installed CLI on the installed standard library"
"$prefix/bin/guardpolicy" test "$prefix"/share/guardpolicy/std/*.gpol \
  >"$tmp/cli.log" || { cat "$tmp/cli.log"; exit 1; }
tail -n1 "$tmp/cli.log"

echo "cmake consumer: ok"
