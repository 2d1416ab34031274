#!/bin/bash
# Pipeline runtime on device buffers over NCCL (label gpu): 2 ranks, one GPU
# each — NCCL refuses two ranks of one communicator on the same device
# (ncclCommInitRank: invalid usage). Skipped (77) without a CUDA+NCCL build,
# without the program or with fewer than 2 GPUs listed by nvidia-smi.
. "$(dirname "$0")/lib_gpu.sh"
need_gpu nccl
bin="$PTC_BUILD/exec_gpu"
[ -x "$bin" ] || skip "exec_gpu not built"
[ "$(gpu_count)" -ge 2 ] || skip "exec gpu needs 2 GPUs (one per rank), $(gpu_count) listed"
mpirun --allow-run-as-root --oversubscribe -np 2 "$bin"
