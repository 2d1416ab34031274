#!/usr/bin/env bash
# The GPU tests' own logic, checked where there is no GPU (label cli): every
# tests/gpu/test_*.sh and every GPU program exits 77 (ctest: skipped, never
# passed); where nvidia-smi lists a GPU that CUDA cannot use (a fake
# nvidia-smi on PATH), the scripts fail instead of skipping; the two-rank
# NCCL test skips with one GPU listed (one rank per GPU). Skipped itself (77)
# on a machine with a GPU, where the gpu label runs the real thing.
. "$(dirname "$0")/lib.sh"
: "${PTC_BUILD:?PTC_BUILD must name the build directory}"
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
    echo "skipped: this machine has a GPU (run ctest -L gpu)"
    exit 77
fi
cuda=0
grep -q '#define PTC_WITH_CUDA 1' "$PTC_BUILD/include/ptc/build_config.h" && cuda=1
export OMPI_MCA_rmaps_base_oversubscribe=1
run() { # WANT NAME CMD...: CMD exits WANT
    local want=$1 name=$2 rc=0
    shift 2
    "$@" > "$T/out" 2>&1 || rc=$?
    if [ "$rc" = "$want" ]; then ok; else bad "$name: exit $rc (want $want)"; cat "$T/out" >&2; fi
}
for s in "$PTC_SRC"/tests/gpu/test_*.sh; do
    run 77 "$(basename "$s") without a GPU" bash "$s"
done
if [ $cuda = 1 ]; then
    run 77 "kernels_gpu without a GPU" "$PTC_BUILD/kernels_gpu"
    run 1 "kernels_gpu, PTC_REQUIRE_GPU=1" env PTC_REQUIRE_GPU=1 "$PTC_BUILD/kernels_gpu"
    run 77 "exec_gpu without a GPU" mpirun --allow-run-as-root -np 2 "$PTC_BUILD/exec_gpu"
    run 77 "reshard_nccl_gpu without a GPU" mpirun --allow-run-as-root -np 1 "$PTC_BUILD/reshard_nccl_gpu"
    # a GPU listed that CUDA cannot use: a failure, not a skip
    mkdir "$T/bin"
    fake() { printf '#!/bin/sh\n' > "$T/bin/nvidia-smi"; for i in $(seq 0 $(($1 - 1))); do
        printf 'echo "GPU %d: Fake GPU (UUID: GPU-%d)"\n' "$i" "$i" >> "$T/bin/nvidia-smi"; done
        chmod +x "$T/bin/nvidia-smi"; }
    fake 1
    run 1 "test_kernels_gpu.sh, a GPU listed but unusable" env PATH="$T/bin:$PATH" bash "$PTC_SRC/tests/gpu/test_kernels_gpu.sh"
    run 1 "test_train_gpu.sh, a GPU listed but unusable" env PATH="$T/bin:$PATH" bash "$PTC_SRC/tests/gpu/test_train_gpu.sh"
    grep -q 'FAIL: --device cuda failed on a machine with a GPU' "$T/out" && ok || bad "test_train_gpu.sh: not the failure expected"
    run 77 "test_exec_gpu.sh, one GPU listed: one rank per GPU" env PATH="$T/bin:$PATH" bash "$PTC_SRC/tests/gpu/test_exec_gpu.sh"
    grep -q 'needs 2 GPUs (one per rank), 1 listed' "$T/out" && ok || bad "test_exec_gpu.sh: not the skip expected"
    fake 2
    run 1 "test_exec_gpu.sh, two GPUs listed but unusable" env PATH="$T/bin:$PATH" bash "$PTC_SRC/tests/gpu/test_exec_gpu.sh"
fi
finish
