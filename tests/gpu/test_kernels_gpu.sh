#!/bin/bash
# GPU training kernels against the CPU references (label gpu): runs
# $PTC_BUILD/kernels_gpu (built from tests/gpu/kernels_gpu.c when
# PTC_WITH_CUDA=ON). Skipped (77) without it or without a GPU listed by
# nvidia-smi; with one, no usable device is a failure (PTC_REQUIRE_GPU=1).
. "$(dirname "$0")/lib_gpu.sh"
need_gpu
bin="$PTC_BUILD/kernels_gpu"
[ -x "$bin" ] || skip "kernels_gpu not built"
exec "$bin"
