#!/bin/bash
# ptc_reshard_device (NCCL + CUDA pack kernels) against ptc_reshard_host.
# Runs $PTC_BUILD/reshard_nccl_gpu with one process per GPU (at most 4);
# without the binary (no CUDA/NCCL build) or without a GPU it says so and
# passes.
set -eu
bin="${PTC_BUILD:?PTC_BUILD must name the build directory}/reshard_nccl_gpu"
if [ ! -x "$bin" ]; then
    echo "reshard_nccl_gpu: not built (no CUDA/NCCL), skipping"
    exit 77
fi
n=$(nvidia-smi -L 2>/dev/null | wc -l || true)
if [ "${n:-0}" -lt 1 ]; then
    echo "reshard_nccl_gpu: no GPU, skipping"
    exit 77
fi
[ "$n" -gt 4 ] && n=4
mpirun --allow-run-as-root --oversubscribe -np 1 "$bin"
if [ "$n" -ge 2 ]; then
    mpirun --allow-run-as-root --oversubscribe -np "$n" "$bin"
fi
