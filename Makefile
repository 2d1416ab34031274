# Thin wrapper over CMake. The two set-up commands for a fresh machine are
# `make demo` and `make test`; both install what is missing first: the
# Debian packages, and for `make test` and `make test-python` only, the
# Python environment of the package's tests (.venv, or $PTC_VENV).
BUILD   ?= build
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
MAKEFLAGS += --no-print-directory
WERROR  := $(if $(CI),ON,OFF)
CMAKE_FLAGS ?=
CTEST   = ctest --output-on-failure -j $(JOBS)

.PHONY: all deps deps-system configure build demo test test-slow test-unit test-python \
        build-asan test-asan bench bench-python gpu-check fuzz install clean

all: build

# Everything the builds and the tests use (scripts/deps.sh).
deps:
	@sh scripts/deps.sh

# The Debian packages only: what building and the demo need.
deps-system:
	@PTC_PYTHON=0 sh scripts/deps.sh

configure: deps-system
	@cmake -S . -B $(BUILD) -DPTC_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The demo builds only the two commands it runs (no tests, no Python).
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target ptc_cli ptc_full
	@sh scripts/demo.sh $(BUILD)/ptc

# The fast tier: every suite (unit, cli, FUSE mounts, mpirun, network
# namespaces, Python) with the configuration matrices cut to pairwise
# subsets (tests/pairwise.py).
test: deps build
	@cd $(BUILD) && $(CTEST) -LE 'gpu|slow'

# The full matrices (label slow: tests/*/test_*_all.sh and the long soaks).
test-slow: deps build
	@cd $(BUILD) && $(CTEST) -L slow -LE gpu

test-unit: build
	@cd $(BUILD) && $(CTEST) -L unit

# The Python package: installs python/ into .venv (made by `make deps`) with
# the test build's libptc and runs tests/python (also part of `make test`).
test-python: deps build
	@cd $(BUILD) && ctest --output-on-failure -V -L python

# The fast tier's unit, MPI and FUSE tests under AddressSanitizer +
# UndefinedBehaviorSanitizer (CPU only; the full matrices add no code path),
# in one ctest run so that the unit tests run beside the multi-process ones.
# Leak checks are on (ASan's default), except in the MPI and FUSE scripts
# (cmake/tests.cmake: Open MPI's own allocations are never freed) and the
# unit tests that start MPI, which turn them off themselves
# (__asan_default_options). test_reshard_mpi compares peak memory figures,
# which ASan's quarantine changes.
build-asan: deps-system
	@cmake -S . -B $(BUILD)-asan -DPTC_SANITIZE=address,undefined -DPTC_WITH_CUDA=OFF \
	    -DPTC_BENCH=OFF -DPTC_WERROR=$(WERROR) -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)

test-asan: build-asan
	@cd $(BUILD)-asan && UBSAN_OPTIONS=print_stacktrace=1 \
	    $(CTEST) -L 'unit|mpi|fuse' -LE slow -E test_reshard_mpi

# libptc.so, libptc.a, headers, ptc.pc, the CMake package and the ptc command
# under PREFIX (default /usr/local).
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# Benchmarks (not part of the tests): figures and ratios to the baselines.
bench: build
	@sh scripts/bench.sh $(BUILD)

# torch.distributed.checkpoint against ptc.save/ptc.load (bench/python/): a
# 565 MiB state, loads into 2 and 8 processes; BENCH_ARGS="--state l" for
# the 1.24 GiB one (bench/python/bench_ckpt.py --help).
bench-python: deps build
	@sh bench/python/run.sh $(BUILD) $(BENCH_ARGS)

# The GPU check (one GPU, <= 6 minutes; never part of CI): the gpu tests and
# the GPU benchmark of CUDA tensors in ptc.save/load/async_save, figures in
# $(BUILD)/gpu-check.txt. Without a GPU the GPU stages are skipped.
gpu-check: build
	@bash scripts/gpu-check.sh --build $(BUILD) --no-build

# libFuzzer binaries (clang): make fuzz, then run build-fuzz/fuzz_<name>_lf.
fuzz: deps-system
	@CC=clang cmake -S . -B $(BUILD)-fuzz -DPTC_FUZZ=ON -DPTC_WITH_CUDA=OFF -DPTC_BENCH=OFF >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
