#!/bin/bash
# GPU training kernels against the CPU references (label gpu).
# Runs $PTC_BUILD/kernels_gpu (built from tests/gpu/kernels_gpu.c when
# PTC_WITH_CUDA=ON); without that binary or without a GPU it says so and
# passes, as a CPU-only build has nothing to check here.
set -eu
bin="${PTC_BUILD:?PTC_BUILD must name the build directory}/kernels_gpu"
if [ ! -x "$bin" ]; then
    echo "kernels_gpu: not built (PTC_WITH_CUDA=OFF), skipping"
    exit 77
fi
exec "$bin"
