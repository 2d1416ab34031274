#!/bin/bash
# ptc_reshard_device (NCCL + CUDA pack kernels) against ptc_reshard_host
# (label gpu): $PTC_BUILD/reshard_nccl_gpu alone, then with one process per
# GPU (at most 4). Skipped (77) without a CUDA+NCCL build, without the
# program or without a GPU listed by nvidia-smi.
. "$(dirname "$0")/lib_gpu.sh"
need_gpu nccl
bin="$PTC_BUILD/reshard_nccl_gpu"
[ -x "$bin" ] || skip "reshard_nccl_gpu not built"
n=$(gpu_count)
[ "$n" -gt 4 ] && n=4
mpirun --allow-run-as-root --oversubscribe -np 1 "$bin"
if [ "$n" -ge 2 ]; then
    mpirun --allow-run-as-root --oversubscribe -np "$n" "$bin"
else
    echo "reshard_nccl_gpu: one GPU: the multi-process run is skipped"
fi
