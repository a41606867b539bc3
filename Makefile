# guardpolicy developer entry points. Every target installs what is missing first.
#   make demo   build, then what to do for each demo model (latency, tokens/s, changes caught)
#   make test   build, then every test (GoogleTest through ctest, pytest, the docs' examples)
SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUILD_DIR := build
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

APT_PACKAGES := antlr4 libantlr4-runtime-dev libyaml-cpp-dev libgtest-dev libgmock-dev \
  libbenchmark-dev libre2-dev libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev pkg-config g++ \
  default-jre-headless ccache valgrind clang-format clang-tidy
TORCH ?= 2.13.0
# torch 2.11's and 2.12's guard builder asserts on a property that returns a new object per read
# when a guard_filter_fn is set (Dynamo reads `object.__getattribute__(obj, name)` by running the
# property and guards what it returned, and a filter makes torch build the guards twice; 2.13
# traces the property's getter instead); transformers after 5.17 reads one
# (`config.per_layer_config`) in GPT-2's forward, so a torch 2.11 or 2.12 leg keeps the
# transformers of the GPU image (5.17.0).
TRANSFORMERS := $(if $(filter 2.11.% 2.12.%,$(TORCH)),transformers==5.17.0,transformers)
PIP_TOOLS := pybind11 scikit-build-core pytest pytest-xdist hypothesis tqdm tlparse $(TRANSFORMERS) peft diffusers matplotlib cmake ninja pygments ruff
PIP_PACKAGES := torch==$(TORCH) $(PIP_TOOLS)
DEPS_STAMP := $(VENV)/.deps-installed

.PHONY: deps apt-deps build demo test test-cpp test-python leg-deps test-python-leg test-python-matrix test-cmake-consumer \
  docs-test lint lint-python bench sanitize-build test-asan test-tsan fuzz test-watch-long clean

apt-deps:
	@missing=$$(for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(DEPS_STAMP): Makefile pyproject.toml
	@$(MAKE) --no-print-directory apt-deps
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(PIP_PACKAGES)
	@touch $@

deps: $(DEPS_STAMP)

# One CMake tree (build/) serves the wheel, the CLI and the C++ tests.
build: deps
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps . \
	  -Cbuild-dir=$(BUILD_DIR) -Ccmake.build-type=Release \
	  -Ccmake.define.GUARDPOLICY_BUILD_TESTS=ON -Ccmake.define.GUARDPOLICY_BUILD_BENCH=ON \
	  -Ccmake.define.GUARDPOLICY_INSTALL=ON \
	  -Ccmake.define.pybind11_DIR=$$($(PY) -m pybind11 --cmakedir)

# Per demo model (MLP, GPT-2, a HF Llama decode step), Inductor: no filter, torch's recipe, watch_state (the
# recommendation, starred) and the suggested policy + verify + direct dispatch; build/suggested_MODEL.gpol, build/frontier_MODEL.png.
demo: build
	$(PY) -m guardpolicy demo --out $(BUILD_DIR)

test-cpp: build
	$(VENV)/bin/ctest --test-dir $(BUILD_DIR) --output-on-failure -j2

# The suite runs in PYTEST_JOBS processes (pytest-xdist), a test file's tests in one process
# (``--dist loadfile``: its module fixtures built once, its tests in order); PYTEST_JOBS=0 runs
# it in this process alone.
PYTEST_JOBS ?= 2
PYTEST_PAR := $(if $(filter 0,$(PYTEST_JOBS)),,-n $(PYTEST_JOBS) --dist loadfile)

test-python: build
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -q $(PYTEST_PAR) tests/python

# Installs build/ to a temporary prefix and builds tests/cmake_consumer against it.
test-cmake-consumer: build
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH tests/cmake_consumer/run.sh $(BUILD_DIR)

# Every fenced code block of README.md and docs/*.md (conventions: docs/tools/docs_test.py).
docs-test: build
	$(PY) docs/tools/docs_test.py

test: test-cpp test-python test-cmake-consumer docs-test

# ruff on the Python package, clang-tidy on the C++ sources (build/compile_commands.json), and
# clang-format on the C++ lines changed since the merge base with main (.ci/lint.sh).
lint: build lint-python
	.ci/lint.sh $(BUILD_DIR) $(VENV)/bin/ruff

# ruff (pyproject.toml [tool.ruff]) on every Python file of the repository: seconds, so CI runs
# it (.ci/run); clang-tidy, minutes on this machine, is `make lint`'s alone.
lint-python: $(DEPS_STAMP)
	$(VENV)/bin/ruff check bindings/python/guardpolicy tests/python bench docs/tools

# Portability legs: the Python suite on another interpreter or torch release (all but the
# `soak` tests, long real-compile runs that `make test` runs once; see pyproject.toml), e.g.
#   make test-python-leg PYVER=3.12 TORCH=2.13.0    make test-python-matrix (each leg of PY_LEGS)
# A leg has its own virtual environment (.venv-<leg>) and CMake tree (build-<leg>): scikit-build-core
# builds guardpolicy there for that interpreter, as `make build` does for .venv (the extension,
# the CLI and the test plugins; the C++ tests run once, in build/). Its dependencies (torch with
# its CUDA wheels is ~5 GB) are installed once per machine, in $(GP_CACHE)/deps-<leg>, which the
# leg's venv sees through a .pth file after its own site-packages (as
# tests/packaging/fresh_install.sh does): a new checkout, e.g. CI's, installs nothing again, and
# the shared environment never holds a guardpolicy of its own. The interpreter: python<PYVER>
# on PATH, else the newest $(PYENV_ROOT)/versions/<PYVER>.*.
PY_LEGS ?= 3.12:2.11.0 3.11:2.14.1 3.13:2.15.0
PYVER ?= 3.11
GP_CACHE ?= $(HOME)/.cache/guardpolicy
PYENV_ROOT ?= $(HOME)/.pyenv
LEG := py$(PYVER)-torch$(TORCH)
LEG_DEPS := $(GP_CACHE)/deps-$(LEG)
LEG_VENV := .venv-$(LEG)
LEG_BUILD := build-$(LEG)
LEG_PY := $(LEG_VENV)/bin/python

# This machine's pip site config caps torch at 2.14.1 (the releases on its disk): a leg on a
# newer torch (2.15) installs its dependencies with no pip config at all, that one command only.
LEG_PIP_ENV := $(if $(filter 2.15.%,$(TORCH)),PIP_CONFIG_FILE=/dev/null,)

# The leg's dependencies, once per machine (see above).
leg-deps: apt-deps
	@set -e; mkdir -p $(GP_CACHE); exec 9>$(LEG_DEPS).lock; flock 9; \
	if [ "$$(cat $(LEG_DEPS)/.guardpolicy-deps 2>/dev/null)" != "$(PIP_PACKAGES)" ]; then \
	  py=$$(command -v python$(PYVER) 2>/dev/null) && $$py -c '' 2>/dev/null \
	    || py=$$(ls -d $(PYENV_ROOT)/versions/$(PYVER).* 2>/dev/null | sort -V | tail -n 1)/bin/python$(PYVER); \
	  [ -x "$$py" ] || { echo "no Python $(PYVER): no python$(PYVER) on PATH nor in $(PYENV_ROOT)/versions" >&2; exit 1; }; \
	  echo "== $(LEG): installing $(PIP_PACKAGES) into $(LEG_DEPS)"; \
	  [ -x $(LEG_DEPS)/bin/python ] || $$py -m venv $(LEG_DEPS); \
	  $(LEG_PIP_ENV) $(LEG_DEPS)/bin/python -m pip install -q --disable-pip-version-check $(PIP_PACKAGES) \
	    >$(LEG_DEPS).log 2>&1 || { grep -v '^WARNING: Location' $(LEG_DEPS).log | tail -n 40; exit 1; }; \
	  echo "$(PIP_PACKAGES)" >$(LEG_DEPS)/.guardpolicy-deps; \
	fi

test-python-leg: leg-deps
	@[ -x $(LEG_PY) ] || $(LEG_DEPS)/bin/python -m venv $(LEG_VENV)
	@$(LEG_DEPS)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
	  >$$($(LEG_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_guardpolicy_deps.pth
	@echo "== $(LEG): $$($(LEG_PY) -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)')"
	$(LEG_PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps . \
	  -Cbuild-dir=$(LEG_BUILD) -Ccmake.build-type=Release -Ccmake.define.GUARDPOLICY_BUILD_TEST_PLUGINS=ON \
	  -Ccmake.define.pybind11_DIR=$$($(LEG_PY) -m pybind11 --cmakedir)
	PATH=$(CURDIR)/$(LEG_VENV)/bin:$(LEG_DEPS)/bin:$$PATH GUARDPOLICY_TEST_PLUGIN_DIR=$(CURDIR)/$(LEG_BUILD)/tests/plugins \
	  $(LEG_PY) -m pytest -q $(PYTEST_PAR) tests/python -m "not soak"

# Each leg in turn, with its time; stops at the first that fails.
test-python-matrix:
	@for leg in $(PY_LEGS); do start=$$SECONDS; \
	  $(MAKE) --no-print-directory test-python-leg PYVER=$${leg%%:*} TORCH=$${leg##*:} || exit 1; \
	  echo "== leg python $${leg%%:*} torch $${leg##*:}: $$((SECONDS - start)) s"; done

# A clang build with ASan+UBSan (and libFuzzer coverage) for the C++ tests and the fuzzers.
SAN_DIR := build-san
FUZZ_SECONDS ?= 60
FUZZERS := parse_fuzzer compile_fuzzer artifact_fuzzer

sanitize-build: deps
	@command -v clang++ >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq clang libclang-rt-14-dev; }
	$(VENV)/bin/cmake -S . -B $(SAN_DIR) -G Ninja -DCMAKE_MAKE_PROGRAM=$(CURDIR)/$(VENV)/bin/ninja \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGUARDPOLICY_SANITIZE=ON -DGUARDPOLICY_FUZZ=ON -DGUARDPOLICY_BUILD_TESTS=ON -DGUARDPOLICY_BUILD_BENCH=OFF \
	  -DGUARDPOLICY_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/$(PY) -Dpybind11_DIR=$$($(PY) -m pybind11 --cmakedir)
	$(VENV)/bin/cmake --build $(SAN_DIR) -j2

# The C++ tests under ASan+UBSan, then the watch gate's own tests (tests/python/test_watch_gate.py,
# no torch) against that build's `_core`, loaded by the venv's Python with the ASan runtime
# preloaded; the gate's sources have the vector sanitizer on too (bindings/CMakeLists.txt). No
# conftest: the suite's imports the installed guardpolicy, whose _core's types would clash.
test-asan: sanitize-build
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(VENV)/bin/ctest --test-dir $(SAN_DIR) --output-on-failure -j2
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 LD_PRELOAD=$$(clang -print-file-name=libclang_rt.asan-x86_64.so) \
	  GUARDPOLICY_CORE=$$(ls $(SAN_DIR)/bindings/_core*.so) $(PY) -m pytest -q -p no:cacheprovider --noconftest tests/python/test_watch_gate.py

# The VM's thread test (and the rest of the C++ suite) under ThreadSanitizer.
TSAN_DIR := build-tsan
test-tsan: deps
	@command -v clang++ >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq clang libclang-rt-14-dev; }
	$(VENV)/bin/cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_MAKE_PROGRAM=$(CURDIR)/$(VENV)/bin/ninja \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGUARDPOLICY_SANITIZE_THREAD=ON -DGUARDPOLICY_BUILD_TESTS=ON -DGUARDPOLICY_BUILD_BENCH=OFF
	$(VENV)/bin/cmake --build $(TSAN_DIR) -j2 --target guardpolicy_tests
	TSAN_OPTIONS=halt_on_error=1 $(TSAN_DIR)/tests/cpp/guardpolicy_tests --gtest_filter='Threads*:CompilerVm*:Verifier*'

# Each fuzzer for FUZZ_SECONDS, seeded from the corpus; findings land in build-san/fuzz-*.
fuzz: sanitize-build
	@mkdir -p $(SAN_DIR)/seeds/artifact
	@for f in policies/std/*.gpol tests/corpus/accept/*.gpol; do \
	  $(SAN_DIR)/tools/cli/guardpolicy compile -o $(SAN_DIR)/seeds/artifact/$$(basename $$f .gpol).gpolc $$f \
	    >/dev/null 2>&1 || echo "fuzz: $$f is no single-policy artifact; not an artifact seed"; done
	@for fz in $(FUZZERS); do \
	  mkdir -p $(SAN_DIR)/fuzz-$$fz/corpus; \
	  seeds="policies/std tests/corpus/accept tests/corpus/reject tests/fuzz/seeds"; \
	  [ $$fz = artifact_fuzzer ] && seeds="$(SAN_DIR)/seeds/artifact tests/fuzz/seeds/artifact"; \
	  echo "== $$fz for $(FUZZ_SECONDS) s"; \
	  if ! ASAN_OPTIONS=detect_leaks=1 $(SAN_DIR)/tests/fuzz/$$fz -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 \
	    -artifact_prefix=$(SAN_DIR)/fuzz-$$fz/ -print_final_stats=1 $(SAN_DIR)/fuzz-$$fz/corpus $$seeds \
	    > $(SAN_DIR)/fuzz-$$fz.log 2>&1; then tail -40 $(SAN_DIR)/fuzz-$$fz.log; exit 1; fi; \
	  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|INFO: Done)" $(SAN_DIR)/fuzz-$$fz.log; \
	done

# The generated change sequences under `watch` (tests/python/test_watch_generated.py: Hypothesis
# stateful tests, every call compared with eager) with WATCH_EXAMPLES examples of WATCH_STEPS
# changes instead of `make test`'s 40 of 10 (a sixth as many on Inductor): about 25 minutes on
# the 2-core machine.
WATCH_EXAMPLES ?= 400
WATCH_STEPS ?= 15
test-watch-long: build
	GUARDPOLICY_WATCH_EXAMPLES=$(WATCH_EXAMPLES) GUARDPOLICY_WATCH_STEPS=$(WATCH_STEPS) PATH=$(CURDIR)/$(VENV)/bin:$$PATH \
	  $(PY) -m pytest -q tests/python/test_watch_generated.py

# Both benchmarks in one run, then the filter's share of compile time; writes their sections of
# bench/DETAILS.md (bench/RESULTS.md, the summary, is kept by hand: bench/README.md).
bench: build
	$(PY) bench/make_results.py --vm-bench $(BUILD_DIR)/bench/guardpolicy_vm_bench --out bench/DETAILS.md
	$(PY) bench/compile_share.py --results bench/DETAILS.md --before bench/data/compile_share_before.json
	$(PY) bench/bench_runtime.py --results bench/DETAILS.md

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR) $(TSAN_DIR) build-py*-torch*
