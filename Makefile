# Thin wrapper over CMake. The two set-up commands for a fresh machine are
# `make demo` and `make test`; both install what is missing first.
BUILD   ?= build
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
MAKEFLAGS += --no-print-directory
WERROR  := $(if $(CI),ON,OFF)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test test-unit test-python test-asan bench bench-python gpu-check fuzz install clean

all: build

deps:
	@sh scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DPTC_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@sh scripts/demo.sh $(BUILD)/ptc

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

# The Python package: installs python/ into .venv (made by `make deps`) with
# this build's libptc and runs tests/python (also part of `make test`).
test-python: build
	@cd $(BUILD) && ctest --output-on-failure -V -L python

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (CPU only).
# Leak checks are on (ASan's default), except in the tests that start MPI,
# which turn them off themselves (__asan_default_options).
test-asan: deps
	@cmake -S . -B $(BUILD)-asan -DPTC_SANITIZE=address,undefined -DPTC_WITH_CUDA=OFF \
	    -DPTC_BENCH=OFF -DPTC_WERROR=$(WERROR) -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --output-on-failure -j $(JOBS) -L unit
	@# the MPI and FUSE tests too (training, online resize, checkpoints, elastic,
	@# the mount daemon): Open MPI's own allocations are never freed (no leak
	@# check); test_reshard_mpi compares peak memory figures, which ASan's
	@# quarantine changes
	@cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --output-on-failure -L 'mpi|fuse' -E test_reshard_mpi

# libptc.so, libptc.a, headers, ptc.pc, the CMake package and the ptc command
# under PREFIX (default /usr/local).
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# Benchmarks (not part of the tests): figures and ratios to the baselines.
bench: build
	@sh scripts/bench.sh $(BUILD)

# torch.distributed.checkpoint against ptc.save/ptc.load (bench/python/).
bench-python: build
	@sh bench/python/run.sh $(BUILD)

# The GPU check (one GPU, <= 6 minutes; never part of CI): the gpu tests and
# the GPU benchmark of CUDA tensors in ptc.save/load/async_save, figures in
# $(BUILD)/gpu-check.txt. Without a GPU the GPU stages are skipped.
gpu-check: build
	@bash scripts/gpu-check.sh --build $(BUILD) --no-build

# libFuzzer binaries (clang): make fuzz, then run build-fuzz/fuzz_<name>_lf.
fuzz: deps
	@CC=clang cmake -S . -B $(BUILD)-fuzz -DPTC_FUZZ=ON -DPTC_WITH_CUDA=OFF -DPTC_BENCH=OFF >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
