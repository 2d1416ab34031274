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
# A Python with numpy (tests/gpu/compare_adam.py): $PTC_VENV's, the
# repository's .venv (scripts/deps.sh), or python3; empty when none has it.
numpy_python() {
    local p
    for p in "${PTC_VENV:+$PTC_VENV/bin/python}" "${PTC_SRC:+$PTC_SRC/.venv/bin/python}" python3; do
        [ -n "$p" ] && "$p" -c 'import numpy' 2> /dev/null && { echo "$p"; return 0; }
    done
    return 0
}
# The rounding bound of the gradients of mlp:layers=L,hidden=H,vocab=V,tokens=N
# with G micro-batches a step (docs/runtime.md): D sqrt(K) u, the backward
# pass a chain of D = 2L + 2 float32 reductions of at most K =
# max(N G, V, 4H) terms, each off by about sqrt(K) u (u = 2^-24).
grad_rel() { # L H V N G
    awk -v l="$1" -v h="$2" -v v="$3" -v n="$4" -v g="$5" 'BEGIN {
        k = n * g; if (v > k) k = v; if (4 * h > k) k = 4 * h
        printf "%.3g\n", (2 * l + 2) * sqrt(k) * 2 ^ -24 }'
}
# Two runs compared step by step (with tests/mpi/lib_mpi.sh sourced first:
# MPIRUN, TMP, PTC, fail). adam_job NAME NP CONFIG MICROBATCHES MODEL [ARGS]:
# 3 steps, a version each, exported as $TMP/NAME-{1,2,3}.st (the store
# removed). adam_cmp LR GRAD_REL A B: compare_adam.py on those files.
adam_job() {
    local name=$1 np=$2 cfg=$3 mb=$4 model=$5 v
    shift 5
    "${MPIRUN[@]}" -np "$np" "$PTC" train --config "$cfg" --schedule 1f1b --microbatches "$mb" \
        --steps 3 --model "$model" --seed 5 --store "$TMP/$name" --save-every 1 "$@" > /dev/null ||
        fail "the run $name exited non-zero"
    for v in 1 2 3; do
        "$PTC" export --store "$TMP/$name" --version $v --out "$TMP/$name-$v.st" > /dev/null ||
            fail "export of $name version $v"
    done
    rm -rf "${TMP:?}/$name"
}
adam_cmp() {
    "$py" "$(dirname "${BASH_SOURCE[0]}")/compare_adam.py" --lr "$1" --grad-rel "$2" \
        "$TMP/$3"-{1,2,3}.st -- "$TMP/$4"-{1,2,3}.st
}
