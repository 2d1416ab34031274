#!/bin/bash
# Pipeline runtime on device buffers (NCCL). Needs a CUDA+NCCL build, a GPU
# and mpirun; otherwise says why and passes (CPU-only CI has nothing to run).
set -eu
: "${PTC:?PTC must name the ptc binary}"
cfg="${PTC_BUILD:?PTC_BUILD must name the build directory}/include/ptc/build_config.h"
if ! grep -q '#define PTC_WITH_NCCL 1' "$cfg" 2>/dev/null; then
    echo "exec gpu: built without NCCL, skipping"
    exit 77
fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
    echo "exec gpu: no GPU visible, skipping"
    exit 77
fi
bin="$PTC_BUILD/exec_gpu"
if [ ! -x "$bin" ]; then
    echo "exec gpu: $bin not built, skipping"
    exit 77
fi
# NCCL refuses two ranks of one communicator on the same GPU.
if [ "$(nvidia-smi -L | grep -c GPU)" -lt 2 ]; then
    echo "exec gpu: needs 2 GPUs (one per rank), skipping"
    exit 77
fi
mpirun --allow-run-as-root --oversubscribe -np 2 "$bin"
