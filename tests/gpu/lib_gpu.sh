# Shared helpers of the GPU test scripts (sourced). A script that cannot run
# here exits 77: ctest reports it skipped (cmake/tests.cmake), never passed.
set -eu
skip() { echo "skipped: $*"; exit 77; }
# The GPUs nvidia-smi lists (0 without nvidia-smi or a driver).
gpu_count() { { nvidia-smi -L 2> /dev/null || true; } | grep -c '^GPU' || true; }
# Skip unless the build has CUDA (and NCCL, with "nccl") and a GPU is listed;
# then a program that finds no usable device fails (PTC_REQUIRE_GPU=1).
need_gpu() { # [nccl]
    local cfg="${PTC_BUILD:?PTC_BUILD must name the build directory}/include/ptc/build_config.h"
    grep -q '#define PTC_WITH_CUDA 1' "$cfg" 2> /dev/null || skip "built without CUDA"
    if [ "${1:-}" = nccl ]; then
        grep -q '#define PTC_WITH_NCCL 1' "$cfg" 2> /dev/null || skip "built without NCCL"
    fi
    [ "$(gpu_count)" -ge 1 ] || skip "no GPU listed by nvidia-smi"
    export PTC_REQUIRE_GPU=1
}
