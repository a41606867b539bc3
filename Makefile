# guardpolicy developer entry points. Every target installs what is missing first.
#   make demo   build, then run the main job (std policies on real models, a table)
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
  default-jre-headless
PIP_PACKAGES := torch==2.13.0 pybind11 scikit-build-core pytest transformers matplotlib cmake ninja pygments
DEPS_STAMP := $(VENV)/.deps-installed

.PHONY: deps apt-deps build demo test test-cpp test-python test-cmake-consumer docs-test bench sanitize-build test-asan test-tsan fuzz clean

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

# The bench with the demo defaults (MLP and GPT-2): a table per model; the chart in build/.
demo: build
	$(PY) -m guardpolicy demo --plot $(BUILD_DIR)/demo.png

test-cpp: build
	$(VENV)/bin/ctest --test-dir $(BUILD_DIR) --output-on-failure -j2

test-python: build
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -q tests/python

# Installs build/ to a temporary prefix and builds tests/cmake_consumer against it.
test-cmake-consumer: build
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH tests/cmake_consumer/run.sh $(BUILD_DIR)

# Every fenced code block of README.md and docs/*.md (conventions: tools/docs/docs_test.py).
docs-test: build
	$(PY) tools/docs/docs_test.py

test: test-cpp test-python test-cmake-consumer docs-test

# A clang build with ASan+UBSan (and libFuzzer coverage) for the C++ tests and the fuzzers.
SAN_DIR := build-san
FUZZ_SECONDS ?= 60
FUZZERS := parse_fuzzer compile_fuzzer artifact_fuzzer

sanitize-build: deps
	@command -v clang++ >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq clang libclang-rt-14-dev; }
	$(VENV)/bin/cmake -S . -B $(SAN_DIR) -G Ninja -DCMAKE_MAKE_PROGRAM=$(CURDIR)/$(VENV)/bin/ninja \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGUARDPOLICY_SANITIZE=ON -DGUARDPOLICY_FUZZ=ON -DGUARDPOLICY_BUILD_TESTS=ON -DGUARDPOLICY_BUILD_BENCH=OFF
	$(VENV)/bin/cmake --build $(SAN_DIR) -j2

test-asan: sanitize-build
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(VENV)/bin/ctest --test-dir $(SAN_DIR) --output-on-failure -j2

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
	  $(SAN_DIR)/tools/cli/guardpolicy compile -o $(SAN_DIR)/seeds/artifact/$$(basename $$f .gpol).gpolc $$f >/dev/null; done
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

# Both benchmarks in one run; writes bench/RESULTS.md.
bench: build
	$(PY) bench/make_results.py --vm-bench $(BUILD_DIR)/bench/guardpolicy_vm_bench

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR) $(TSAN_DIR)
