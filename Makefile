# guardpolicy developer entry points. Every target installs what is missing first.
#   make demo   build, then run the main job (std policies on real models, a table)
#   make test   build, then every test (GoogleTest through ctest, then pytest)
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
PIP_PACKAGES := torch==2.13.0 pybind11 scikit-build-core pytest transformers cmake ninja
DEPS_STAMP := $(VENV)/.deps-installed

.PHONY: deps apt-deps build demo test test-cpp test-python bench clean

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
	  -Ccmake.define.pybind11_DIR=$$($(PY) -m pybind11 --cmakedir)

demo: build
	$(PY) -m guardpolicy demo

test-cpp: build
	$(VENV)/bin/ctest --test-dir $(BUILD_DIR) --output-on-failure -j2

test-python: build
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m pytest -q tests/python

test: test-cpp test-python

# Both benchmarks in one run; writes bench/RESULTS.md.
bench: build
	$(PY) bench/make_results.py --vm-bench $(BUILD_DIR)/bench/guardpolicy_vm_bench

clean:
	rm -rf $(BUILD_DIR)
